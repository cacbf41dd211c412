// Trace formats: Mooncake JSONL and CSV (Azure's columns and date-times), the errors bad lines get
// (file and line number), sorting, the zero-output note, format detection and the round trip.
#include "sim/trace_parsers.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "sim/trace.h"

namespace kvs {
namespace {

TEST(MooncakeJsonl, ParsesTheReleaseFormat) {
  const std::string text =
      "{\"timestamp\": 0, \"input_length\": 6758, \"output_length\": 500, \"hash_ids\": [0, 1, 2, "
      "3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]}\n"
      "\n"
      "{\"timestamp\": 3052, \"input_length\": 2290, \"output_length\": 316, \"hash_ids\": [0, 42, "
      "43, 44, 45]}\r\n";
  auto t = parse_mooncake_jsonl(text, "t.jsonl");
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  ASSERT_EQ(t->requests.size(), 2u);
  EXPECT_EQ(t->block_tokens, 512u);
  EXPECT_DOUBLE_EQ(t->requests[1].arrival_s, 3.052);
  EXPECT_EQ(t->requests[0].input_tokens, 6758u);
  EXPECT_EQ(t->requests[0].output_tokens, 500u);
  EXPECT_EQ(t->requests[1].hash_ids, (std::vector<uint64_t>{0, 42, 43, 44, 45}));
  EXPECT_TRUE(validate_trace(*t).is_ok());
}

TEST(MooncakeJsonl, BadLinesNameTheLine) {
  struct Case {
    const char* line;
    const char* message;
  };
  const Case cases[] = {
      {"not json", "t.jsonl line 2: not a JSON object"},
      {"[1, 2]", "t.jsonl line 2: not a JSON object"},
      {"{\"input_length\": 10, \"output_length\": 1}", "line 2: 'timestamp'"},
      {"{\"timestamp\": -1, \"input_length\": 10, \"output_length\": 1}", "line 2: 'timestamp'"},
      {"{\"timestamp\": 1, \"output_length\": 1}", "line 2: 'input_length' is missing"},
      {"{\"timestamp\": 1, \"input_length\": 1.5, \"output_length\": 1}",
       "line 2: 'input_length' must be a whole number"},
      {"{\"timestamp\": 1, \"input_length\": 0, \"output_length\": 1}",
       "line 2: 'input_length' must be at least 1"},
      {"{\"timestamp\": 1, \"input_length\": 99999999999, \"output_length\": 1}",
       "line 2: 'input_length' must be a whole number in [0, 4294967295]"},
      {"{\"timestamp\": 1, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": 3}",
       "line 2: 'hash_ids' must be an array"},
      {"{\"timestamp\": 1, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [-1]}",
       "line 2: 'hash_ids' must hold whole numbers"},
      {"{\"timestamp\": 1, \"input_length\": 600, \"output_length\": 1, \"hash_ids\": [1, 2, 3]}",
       "line 2: 3 hash_ids for 600 input tokens: at most 2 blocks of 512"},
  };
  for (const Case& c : cases) {
    const std::string text =
        std::string("{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1}\n") + c.line;
    auto t = parse_mooncake_jsonl(text, "t.jsonl");
    ASSERT_FALSE(t.is_ok()) << c.line;
    EXPECT_NE(t.status().message().find(c.message), std::string::npos)
        << c.line << " -> " << t.status().message();
  }
  auto empty = parse_mooncake_jsonl("\n\n", "e.jsonl");
  ASSERT_FALSE(empty.is_ok());
  EXPECT_NE(empty.status().message().find("no requests"), std::string::npos);
}

TEST(MooncakeJsonl, SortsByArrivalAndNotesZeroOutputs) {
  const std::string text =
      "{\"timestamp\": 2000, \"input_length\": 5, \"output_length\": 0}\n"
      "{\"timestamp\": 1000, \"input_length\": 6, \"output_length\": 2}\n"
      "{\"timestamp\": 1000, \"input_length\": 7, \"output_length\": 3}\n";
  auto t = parse_mooncake_jsonl(text, "t.jsonl");
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ(t->requests[0].input_tokens, 6u);  // stable: ties keep file order
  EXPECT_EQ(t->requests[1].input_tokens, 7u);
  EXPECT_EQ(t->requests[2].output_tokens, 1u);
  ASSERT_EQ(t->notes.size(), 1u);
  EXPECT_NE(t->notes[0].find("1 requests with 0 output tokens"), std::string::npos);
}

TEST(CsvTrace, AzureColumnsAndDateTimes) {
  const std::string text =
      "TIMESTAMP,ContextTokens,GeneratedTokens\n"
      "2023-11-16 18:15:46.6805900,4808,10\n"
      "2023-11-16 18:15:50.9951690,3180,8\n"
      "2023-11-17 00:00:00,100,0\n";
  auto t = parse_csv_trace(text, "azure.csv");
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  ASSERT_EQ(t->requests.size(), 3u);
  EXPECT_DOUBLE_EQ(t->requests[0].arrival_s, 0);
  EXPECT_NEAR(t->requests[1].arrival_s, 4.314579, 1e-6);
  EXPECT_NEAR(t->requests[2].arrival_s, 5 * 3600 + 44 * 60 + 13.31941, 1e-5);
  EXPECT_EQ(t->requests[0].input_tokens, 4808u);
  EXPECT_EQ(t->requests[2].output_tokens, 1u);  // 0 made 1, noted
  EXPECT_EQ(t->notes.size(), 1u);
  EXPECT_TRUE(t->requests[0].hash_ids.empty());
}

TEST(CsvTrace, NumericSecondsAnyColumnOrder) {
  const std::string text =
      "output_tokens,extra,timestamp,prompt_tokens\n5,x,10.5,100\n7,y,10,200\n";
  auto t = parse_csv_trace(text, "s.csv");
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ(t->requests[0].input_tokens, 200u);  // sorted: 10 before 10.5
  EXPECT_DOUBLE_EQ(t->requests[1].arrival_s, 0.5);
}

TEST(CsvTrace, BadRowsNameTheLine) {
  auto header = parse_csv_trace("time,tokens\n1,2\n", "h.csv");
  ASSERT_FALSE(header.is_ok());
  EXPECT_NE(header.status().message().find("h.csv line 1: the header must name"),
            std::string::npos);
  const char* bad[][2] = {
      {"timestamp,prompt_tokens,output_tokens\n1,2,3\nyesterday,2,3\n",
       "b.csv line 3: timestamp 'yesterday'"},
      {"timestamp,prompt_tokens,output_tokens\n1,2,3\n2,-4,3\n",
       "b.csv line 3: prompt tokens '-4'"},
      {"timestamp,prompt_tokens,output_tokens\n1,0,3\n", "b.csv line 2: a prompt needs"},
      {"timestamp,prompt_tokens,output_tokens\n1,2\n", "b.csv line 2: expected 3 columns"},
  };
  for (const auto& c : bad) {
    auto t = parse_csv_trace(c[0], "b.csv");
    ASSERT_FALSE(t.is_ok()) << c[0];
    EXPECT_NE(t.status().message().find(c[1]), std::string::npos) << t.status().message();
  }
}

TEST(TraceFiles, DetectsTheFormatAndRoundTrips) {
  const auto dir = std::filesystem::temp_directory_path() / "kvserve_sim_trace_test";
  std::filesystem::create_directories(dir);
  Trace t;
  t.requests = {{.arrival_s = 0, .input_tokens = 700, .output_tokens = 3, .hash_ids = {4, 5}},
                {.arrival_s = 1.25, .input_tokens = 9, .output_tokens = 1, .hash_ids = {}}};
  const std::string jsonl = (dir / "t.jsonl").string();
  std::ofstream(jsonl) << trace_to_mooncake_jsonl(t);
  auto back = load_trace(jsonl, TraceFormat::kAuto);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  ASSERT_EQ(back->requests.size(), 2u);
  EXPECT_EQ(back->requests[0].hash_ids, t.requests[0].hash_ids);
  EXPECT_DOUBLE_EQ(back->requests[1].arrival_s, 1.25);
  const std::string csv = (dir / "t.csv").string();
  std::ofstream(csv) << "timestamp,prompt_tokens,output_tokens\n0,5,5\n";
  auto c = load_trace(csv, TraceFormat::kAuto);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->requests.size(), 1u);
  EXPECT_FALSE(load_trace((dir / "missing.jsonl").string(), TraceFormat::kAuto).is_ok());
  EXPECT_FALSE(parse_trace_format("parquet").is_ok());
  std::filesystem::remove_all(dir);
}

TEST(TraceStats, ReuseAtHashBlockGranularity) {
  Trace t;
  t.block_tokens = 10;
  t.requests = {{.input_tokens = 25, .output_tokens = 1, .hash_ids = {1, 2, 3}},
                {.input_tokens = 25, .output_tokens = 1, .hash_ids = {1, 2, 4}},   // 20 reused
                {.input_tokens = 15, .output_tokens = 1, .hash_ids = {9, 2}},      // 0: other root
                {.input_tokens = 25, .output_tokens = 1, .hash_ids = {1, 2, 3}}};  // 25 (capped)
  const TraceStats s = trace_stats(t);
  EXPECT_EQ(s.input_tokens, 90u);
  EXPECT_EQ(s.reused_tokens, 45u);
  EXPECT_EQ(s.max_total_tokens, 26u);
  Trace huge;
  huge.requests = {{.input_tokens = UINT32_MAX, .output_tokens = UINT32_MAX}};
  EXPECT_EQ(trace_stats(huge).max_total_tokens, 2 * uint64_t{UINT32_MAX});  // no wrap-around
  EXPECT_TRUE(scale_trace_rate(t, 2).is_ok());
  EXPECT_FALSE(scale_trace_rate(t, 0).is_ok());
  truncate_trace(t, 2);
  EXPECT_EQ(t.requests.size(), 2u);
}

}  // namespace
}  // namespace kvs
