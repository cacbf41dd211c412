// AccessLog: the line's fields in both formats, the level filter, and whole lines under threads.
#include "server/access_log.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvs {
namespace {

AccessRecord record() {
  return {.request_id = "cmpl-7",
          .tenant = "alice",
          .route = "/v1/completions",
          .status = 200,
          .prompt_tokens = 40,
          .cached_tokens = 32,
          .output_tokens = 5,
          .ttft_s = 0.25,
          .total_s = 1.5,
          .outcome = "ok"};
}

// Everything `fn` writes to a log on an in-memory file, as lines.
template <typename Fn>
std::vector<std::string> lines_of(LogFormat format, LogLevel level, Fn fn) {
  char* buf = nullptr;
  size_t size = 0;
  std::FILE* out = open_memstream(&buf, &size);
  {
    AccessLog log(format, level, out);
    fn(log);
  }
  std::fclose(out);
  std::vector<std::string> lines;
  std::istringstream in(std::string(buf, size));
  std::free(buf);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

TEST(AccessLog, TextLineNamesEveryField) {
  const auto lines =
      lines_of(LogFormat::kText, LogLevel::kInfo, [](AccessLog& l) { l.request(record()); });
  ASSERT_EQ(lines.size(), 1u);
  for (const char* want :
       {"id=cmpl-7", "tenant=alice", "route=/v1/completions", "status=200", "prompt_tokens=40",
        "cached_tokens=32", "output_tokens=5", "ttft_s=0.250", "total_s=1.500", "outcome=ok"})
    EXPECT_NE(lines[0].find(want), std::string::npos) << want << " in " << lines[0];
}

TEST(AccessLog, JsonLineIsOneObjectWithTypedFields) {
  AccessRecord r = record();
  r.ttft_s.reset();  // no token produced
  const auto lines =
      lines_of(LogFormat::kJson, LogLevel::kInfo, [&](AccessLog& l) { l.request(r); });
  ASSERT_EQ(lines.size(), 1u);
  const nlohmann::json j = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(j["request_id"], "cmpl-7");
  EXPECT_EQ(j["status"], 200);
  EXPECT_EQ(j["cached_tokens"], 32);
  EXPECT_TRUE(j["ttft_s"].is_null());
  EXPECT_DOUBLE_EQ(j["total_s"].get<double>(), 1.5);
  EXPECT_EQ(j["level"], "info");
}

TEST(AccessLog, LevelFiltersAccessLinesAndMessages) {
  const auto lines = lines_of(LogFormat::kText, LogLevel::kWarning, [](AccessLog& l) {
    l.request(record());
    l.message(LogLevel::kInfo, "not shown");
    l.message(LogLevel::kWarning, "shown");
  });
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("warning: shown"), std::string::npos);
}

TEST(AccessLog, ConcurrentWritersNeverInterleaveLines) {
  const auto lines = lines_of(LogFormat::kJson, LogLevel::kInfo, [](AccessLog& l) {
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; ++t)
      ts.emplace_back([&] {
        for (int i = 0; i < 200; ++i) l.request(record());
      });
    for (auto& t : ts) t.join();
  });
  ASSERT_EQ(lines.size(), 800u);
  for (const std::string& line : lines) EXPECT_TRUE(nlohmann::json::accept(line)) << line;
}

TEST(AccessLog, BadFlagValuesAreClearErrors) {
  EXPECT_NE(parse_log_format("xml").status().message().find("text or json"), std::string::npos);
  EXPECT_NE(parse_log_level("loud").status().message().find("debug, info"), std::string::npos);
  EXPECT_EQ(*parse_log_level("warning"), LogLevel::kWarning);
}

}  // namespace
}  // namespace kvs
