// The simulation loop: deterministic, preempts (recompute and swap) when the pool is too small and
// still finishes every request with its exact output length, rejects what can never fit, splits
// requests over replicas, and reports (text, JSON with prefix_cache_hit_rate, SVG, sweep table).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "sim/sim_report.h"
#include "sim/sim_svg.h"
#include "sim/sim_test_util.h"
#include "sim/simulation.h"
#include "sim/sweep.h"
#include "sim/trace_generator.h"

namespace kvs {
namespace {

class Simulation : public ::testing::Test {
 protected:
  void SetUp() override { test::use_source_data_dir(); }
  static SimResult run(const SimArgs& a, const Trace& t) {
    auto r = run_simulation(test::resolve_or_die(a), t);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    return std::move(r).value();
  }
};

bool same_records(const SimResult& a, const SimResult& b) {
  if (a.replicas.size() != b.replicas.size()) return false;
  for (size_t i = 0; i < a.replicas.size(); ++i) {
    const auto& x = a.replicas[i].records;
    const auto& y = b.replicas[i].records;
    if (x.size() != y.size()) return false;
    for (size_t j = 0; j < x.size(); ++j)
      if (x[j].first_token_s != y[j].first_token_s || x[j].finish_s != y[j].finish_s ||
          x[j].cached_tokens != y[j].cached_tokens || x[j].preemptions != y[j].preemptions)
        return false;
  }
  return true;
}

TEST_F(Simulation, IsDeterministic) {
  const Trace t = generate_trace({.requests = 120, .rate_per_s = 20, .seed = 11});
  SimArgs a = test::llama_h100_args();
  a.kv_cache_memory = "2GiB";  // small enough to preempt
  const SimResult x = run(a, t), y = run(a, t);
  EXPECT_TRUE(same_records(x, y));
  EXPECT_EQ(x.summary.steps, y.summary.steps);
  EXPECT_EQ(x.summary.prefix_hit_tokens, y.summary.prefix_hit_tokens);
}

// A what-if of far more memory than the trace can use runs over a pool of just the blocks the trace
// can reach (100 TB was 9 GB of bookkeeping), and gives the very run the whole pool gives: the
// same records, steps and hits as a pool of exactly that many blocks, and the report still shows
// the pool asked for.
TEST_F(Simulation, AHugePoolTracksOnlyTheBlocksTheTraceCanUse) {
  const Trace t = generate_trace({.requests = 80, .rate_per_s = 40, .seed = 5});
  SimArgs huge = test::llama_h100_args();
  huge.hw.memory = "100TB";
  const SimSetup hs = test::resolve_or_die(huge);
  const KvPoolPlan used = pool_the_trace_can_use(hs.pool, t);
  ASSERT_LT(used.num_blocks, hs.pool.num_blocks / 1000);
  EXPECT_EQ(used.block_bytes, hs.pool.block_bytes);
  const auto hr = run_simulation(hs, t);
  ASSERT_TRUE(hr.is_ok()) << hr.status().to_string();
  EXPECT_EQ(hr->simulated_blocks, used.num_blocks);
  EXPECT_EQ(hr->summary.completed, 80u);
  // The same run over a pool of exactly those blocks (which no cap shrinks further).
  SimSetup exact = hs;
  exact.pool = used;
  EXPECT_EQ(pool_the_trace_can_use(exact.pool, t).num_blocks, used.num_blocks);
  const auto er = run_simulation(exact, t);
  ASSERT_TRUE(er.is_ok());
  EXPECT_TRUE(same_records(*hr, *er));
  EXPECT_EQ(hr->summary.steps, er->summary.steps);
  EXPECT_EQ(hr->summary.prefix_hit_tokens, er->summary.prefix_hit_tokens);
  EXPECT_EQ(hr->summary.preemptions_recompute + hr->summary.preemptions_swap, 0u);
  const auto j = nlohmann::json::parse(render_sim_json(hs, *hr, 4));
  EXPECT_EQ(j["setup"]["num_blocks"].get<uint32_t>(), hs.pool.num_blocks);
  // A pool smaller than the trace's demand is run as it is.
  SimArgs small = test::llama_h100_args();
  small.kv_cache_memory = "2GiB";
  const SimSetup ss = test::resolve_or_die(small);
  EXPECT_EQ(pool_the_trace_can_use(ss.pool, t).num_blocks, ss.pool.num_blocks);
}

TEST_F(Simulation, PreemptsInASmallPoolAndFinishesEverything) {
  const Trace t = generate_trace({.requests = 100, .rate_per_s = 100, .seed = 2});
  SimArgs a = test::llama_h100_args();
  a.kv_cache_memory = "3GiB";  // 1,536 blocks: a dozen long prompts at once
  const SimResult r = run(a, t);
  EXPECT_EQ(r.summary.completed, 100u);
  EXPECT_GT(r.summary.preemptions_recompute, 0u);
  EXPECT_EQ(r.summary.preemptions_swap, 0u);
  EXPECT_GT(r.summary.requests_preempted, 0u);
  for (const RequestRecord& rec : r.replicas[0].records) {
    EXPECT_TRUE(rec.completed());
    EXPECT_GE(rec.first_token_s, rec.arrival_s);
    EXPECT_GE(rec.finish_s, rec.first_token_s);
  }
  EXPECT_LE(r.summary.kv_in_use_max, 1.0);

  a.preemption_mode = "swap";
  a.swap_space = "64GiB";
  const SimResult s = run(a, t);
  EXPECT_EQ(s.summary.completed, 100u);
  EXPECT_GT(s.summary.preemptions_swap, 0u);
}

// --step-log: a line per step, in order, that accounts for every sampled token and preemption.
TEST_F(Simulation, StepLogRecordsEveryStep) {
  const Trace t = generate_trace({.requests = 100, .rate_per_s = 100, .seed = 2});
  SimArgs a = test::llama_h100_args();
  a.kv_cache_memory = "3GiB";  // preempts (the test above)
  const SimSetup setup = test::resolve_or_die(a);
  const std::string path = ::testing::TempDir() + "/kvserve_sim_step_log.jsonl";
  auto log = StepLog::open(path);
  ASSERT_TRUE(log.is_ok()) << log.status().to_string();
  auto r = run_simulation(setup, t, log->get());
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_TRUE((*log)->close().is_ok());

  std::ifstream in(path);
  std::string line;
  uint64_t steps = 0, recomputes = 0;
  double last_start = -1;
  std::map<uint64_t, uint32_t> sampled;  // seq -> chunks that sampled a token
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    ++steps;
    EXPECT_GE(j["start_s"].get<double>(), last_start);
    EXPECT_GT(j["end_s"].get<double>(), j["start_s"].get<double>());
    last_start = j["start_s"].get<double>();
    recomputes += j["preempted_recompute"].get<uint32_t>();
    ASSERT_FALSE(j["chunks"].empty());
    for (const auto& c : j["chunks"]) {
      ASSERT_EQ(c.size(), 5u);
      EXPECT_GT(c[2].get<uint32_t>(), 0u);
      if (c[4].get<int>() == 1) ++sampled[c[0].get<uint64_t>()];
    }
  }
  EXPECT_EQ(steps, r->summary.steps);
  EXPECT_GT(recomputes, 0u);
  EXPECT_EQ(recomputes, r->summary.preemptions_recompute);
  // Every output token is sampled once, by the chunk that reached its sequence's end.
  ASSERT_EQ(sampled.size(), t.requests.size());
  for (size_t i = 0; i < t.requests.size(); ++i)
    EXPECT_EQ(sampled[i + 1], t.requests[i].output_tokens) << "request " << i;
  std::filesystem::remove(path);

  SimArgs two = a;
  two.gpus = 2;
  auto refused = run_simulation(test::resolve_or_die(two), t, log->get());
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("single replica"), std::string::npos);
}

// --arrival-jitter-ms: each seed is one order of the requests a trace stamps with one time, and
// the same seed the same run; every request still arrives no earlier than its trace time.
TEST_F(Simulation, ArrivalJitterIsSeededAndOnlyDelays) {
  Trace t = generate_trace({.requests = 60, .rate_per_s = 50, .seed = 4});
  for (size_t i = 0; i < t.requests.size(); ++i)
    t.requests[i].arrival_s = static_cast<double>(i / 10);  // bursts of 10 at one time
  SimArgs a = test::llama_h100_args();
  const SimResult plain = run(a, t);
  a.arrival_jitter_ms = 5;
  a.seed = 1;
  const SimResult x = run(a, t), y = run(a, t);
  EXPECT_TRUE(same_records(x, y));
  a.seed = 2;
  const SimResult z = run(a, t);
  EXPECT_FALSE(same_records(x, z));
  EXPECT_FALSE(same_records(plain, x));
  for (const SimResult* r : {&x, &z}) {
    EXPECT_EQ(r->summary.completed, 60u);
    for (const RequestRecord& rec : r->replicas[0].records) {
      const double burst = std::floor(rec.arrival_s);
      EXPECT_GE(rec.arrival_s, burst);
      EXPECT_LT(rec.arrival_s, burst + 0.005);
    }
  }
  Trace u = t;
  EXPECT_TRUE(jitter_trace_arrivals(u, 0, 9).is_ok());
  EXPECT_EQ(u.requests[5].arrival_s, t.requests[5].arrival_s);
  EXPECT_FALSE(jitter_trace_arrivals(u, -1, 9).is_ok());
  a.arrival_jitter_ms = -1;
  EXPECT_FALSE(resolve_sim(a).is_ok());
  EXPECT_TRUE(apply_sim_setting(a, "seed", "7").is_ok());
  EXPECT_EQ(a.seed, 7u);
  EXPECT_TRUE(apply_sim_setting(a, "arrival-jitter-ms", "2.5").is_ok());
  EXPECT_EQ(a.arrival_jitter_ms, 2.5);
}

TEST_F(Simulation, RejectsWhatCanNeverRun) {
  Trace t;
  t.requests = {{.arrival_s = 0, .input_tokens = 100, .output_tokens = 10},
                {.arrival_s = 1, .input_tokens = 5000, .output_tokens = 10},
                {.arrival_s = 2, .input_tokens = 100, .output_tokens = 1}};
  SimArgs a = test::llama_h100_args();
  a.max_model_len = 4096;
  const SimResult r = run(a, t);
  EXPECT_EQ(r.summary.completed, 2u);
  EXPECT_EQ(r.summary.rejected, 1u);
  // One output token: the first token is the last (TPOT has no sample for it).
  EXPECT_EQ(r.replicas[0].records[2].first_token_s, r.replicas[0].records[2].finish_s);
  EXPECT_EQ(r.summary.tpot_s.count, 1u);
}

TEST_F(Simulation, IdleGapsAndLatencyOfALoneRequest) {
  Trace t;
  t.requests = {{.arrival_s = 0, .input_tokens = 1000, .output_tokens = 100},
                {.arrival_s = 100, .input_tokens = 1000, .output_tokens = 100}};
  const SimResult r = run(test::llama_h100_args(), t);
  const RequestRecord& b = r.replicas[0].records[1];
  // Alone on an H100: decode steps are memory-bound, ~15 GB of weights at 85% of 3.35 TB/s.
  const double tpot = (b.finish_s - b.first_token_s) / 99;
  EXPECT_GT(tpot, 5e-3);
  EXPECT_LT(tpot, 8e-3);
  EXPECT_LT(b.first_token_s - b.arrival_s, 0.1);
  EXPECT_NEAR(r.summary.makespan_s, b.finish_s, 1e-9);
  EXPECT_LT(r.summary.busy_fraction, 0.05);  // idle between the two
}

TEST_F(Simulation, ReplicasShareTheTraceRoundRobin) {
  const Trace t = generate_trace({.requests = 90, .rate_per_s = 30, .seed = 4});
  SimArgs a = test::llama_h100_args();
  a.gpus = 3;
  const SimResult r = run(a, t);
  ASSERT_EQ(r.replicas.size(), 3u);
  for (const ReplicaResult& rr : r.replicas) EXPECT_EQ(rr.records.size(), 30u);
  EXPECT_EQ(r.replicas[1].records[0].trace_index, 1u);
  EXPECT_EQ(r.summary.completed, 90u);
}

TEST_F(Simulation, ReportsJsonSvgAndSweepTable) {
  const Trace t = generate_trace({.requests = 40, .rate_per_s = 10, .seed = 9});
  const SimArgs a = test::llama_h100_args();
  const SimSetup setup = test::resolve_or_die(a);
  auto r = run_simulation(setup, t);
  ASSERT_TRUE(r.is_ok());
  const std::string text = render_sim_report(setup, *r);
  for (const char* key : {"TTFT", "TPOT", "prefix cache", "preemptions", "static plan"})
    EXPECT_NE(text.find(key), std::string::npos) << key;
  const auto j = nlohmann::json::parse(render_sim_json(setup, *r, 20));
  EXPECT_DOUBLE_EQ(j["prefix_cache_hit_rate"].get<double>(), r->summary.prefix_cache_hit_rate);
  EXPECT_GE(j["results"]["prefix_cache_hit_rate"].get<double>(), 0.0);
  EXPECT_LE(j["results"]["prefix_cache_hit_rate"].get<double>(), 1.0);
  EXPECT_EQ(j["results"]["completed"].get<uint64_t>(), 40u);
  EXPECT_EQ(j["time_series"].size(), 20u);
  EXPECT_EQ(j["setup"]["num_blocks"].get<uint32_t>(), setup.pool.num_blocks);
  const std::string svg = render_sim_svg(setup, *r);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("preemptions"), std::string::npos);

  auto combos = expand_sweep({"kv-cache-dtype=bf16,fp8", "gpus=1,2"});
  ASSERT_TRUE(combos.is_ok());
  ASSERT_EQ(combos->size(), 4u);
  EXPECT_EQ((*combos)[1], (SweepSettings{{"kv-cache-dtype", "bf16"}, {"gpus", "2"}}));
  std::vector<SweepRow> rows;
  for (const SweepSettings& s : *combos) {
    SimArgs v = a;
    for (const auto& [k, val] : s) ASSERT_TRUE(apply_sim_setting(v, k, val).is_ok());
    SimSetup vs = test::resolve_or_die(v);
    auto vr = run_simulation(vs, t);
    ASSERT_TRUE(vr.is_ok());
    rows.push_back({s, std::move(vs), std::move(vr).value()});
  }
  // fp8 halves the bytes per token: twice the blocks (floor(2x) is 2 floor(x) or one more).
  EXPECT_LE(rows[2].setup.pool.num_blocks - 2 * rows[0].setup.pool.num_blocks, 1u);
  EXPECT_EQ(rows[1].setup.replicas, 2u);
  const std::string table = render_sweep_table(rows);
  EXPECT_NE(table.find("kv-cache-dtype"), std::string::npos);
  EXPECT_NE(table.find("fp8"), std::string::npos);
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 5);
  const auto sj = nlohmann::json::parse(render_sweep_json(rows));
  EXPECT_EQ(sj["sweep"].size(), 4u);
  EXPECT_TRUE(sj["sweep"][0].contains("prefix_cache_hit_rate"));
}

// The time series (JSON and SVG) carries the summary's numbers: preemptions by mode add up, the
// time-weighted running mean is the summary's, the KV fractions stay within the pool; the SVG
// draws one point per interval and bars for the mode that preempted.
TEST_F(Simulation, TimeSeriesAndSvgAgreeWithTheSummary) {
  const Trace t = generate_trace({.requests = 100, .rate_per_s = 100, .seed = 2});
  SimArgs a = test::llama_h100_args();
  a.kv_cache_memory = "3GiB";
  for (const char* mode : {"recompute", "swap"}) {
    a.preemption_mode = mode;
    a.swap_space = "64GiB";
    const SimSetup setup = test::resolve_or_die(a);
    const SimResult r = run(a, t);
    const SimSummary& m = r.summary;
    ASSERT_GT(m.preemptions_recompute + m.preemptions_swap, 0u) << mode;
    const size_t n = 37;
    const auto pts = time_series(r.replicas, setup.pool.num_blocks, m.makespan_s, n);
    ASSERT_EQ(pts.size(), n);
    uint64_t rc = 0, sw = 0;
    double running = 0;
    for (const SeriesPoint& p : pts) {
      rc += p.preempted_recompute;
      sw += p.preempted_swap;
      running += p.running * (p.end_s - p.start_s);
      EXPECT_GE(p.kv_in_use, 0.0);
      EXPECT_LE(p.kv_in_use + p.kv_cached_free, 1.0 + 1e-9);
    }
    EXPECT_EQ(rc, m.preemptions_recompute);
    EXPECT_EQ(sw, m.preemptions_swap);
    EXPECT_NEAR(running / m.makespan_s, m.running_mean, 1e-9 * m.running_mean);

    const std::string svg = render_sim_svg(setup, r);
    const size_t line = svg.find("<polyline class=\"running\"");
    ASSERT_NE(line, std::string::npos);
    const std::string points = svg.substr(line, svg.find("/>", line) - line);
    EXPECT_EQ(std::count(points.begin(), points.end(), ','), 300);  // one x,y per interval
    EXPECT_NE(svg.find("max-num-seqs x replicas"), std::string::npos);
    const bool swap = std::string(mode) == "swap";
    EXPECT_EQ(svg.find("class=\"swap\"") != std::string::npos, swap && m.preemptions_swap > 0);
    EXPECT_EQ(svg.find("class=\"recompute\"") != std::string::npos, m.preemptions_recompute > 0);
    EXPECT_NE(svg.find(std::to_string(m.preemptions_recompute) + " recompute + " +
                       std::to_string(m.preemptions_swap) + " swap"),
              std::string::npos);
  }
}

// A per-layer format list holds commas, so its sweep values are separated by ';': a list of two
// layers is one run, not two runs of one layer each.
TEST(Sweep, LayerListsAreSeparatedBySemicolons) {
  auto combos = expand_sweep(
      {"kv-cache-dtype-k-layers=18=int4_chan64;18=int4_chan64,20=int4_chan64", "gpus=1,2"});
  ASSERT_TRUE(combos.is_ok());
  ASSERT_EQ(combos->size(), 4u);
  EXPECT_EQ((*combos)[0][0].second, "18=int4_chan64");
  EXPECT_EQ((*combos)[2][0].second, "18=int4_chan64,20=int4_chan64");
  EXPECT_EQ((*combos)[3][1].second, "2");
  auto one = expand_sweep({"--kv-cache-dtype-v-layers=1=int3_had,2=int3_had"});
  ASSERT_TRUE(one.is_ok());
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0][0], (std::pair<std::string, std::string>{"kv-cache-dtype-v-layers",
                                                               "1=int3_had,2=int3_had"}));
  EXPECT_FALSE(expand_sweep({"kv-cache-dtype-k-layers=18=int4_chan64;;20=int4_chan64"}).is_ok());
}

TEST(Sweep, BadSpecsAreErrors) {
  for (const char* bad : {"gpus", "=1,2", "gpus=", "gpus=1,,2"})
    EXPECT_FALSE(expand_sweep({bad}).is_ok()) << bad;
  EXPECT_FALSE(expand_sweep({"gpus=1", "gpus=2"}).is_ok());
  SimArgs a;
  EXPECT_FALSE(apply_sim_setting(a, "colour", "red").is_ok());
  EXPECT_FALSE(apply_sim_setting(a, "gpus", "two").is_ok());
  EXPECT_FALSE(apply_sim_setting(a, "enable-prefix-caching", "maybe").is_ok());
  EXPECT_TRUE(apply_sim_setting(a, "enable-prefix-caching", "off").is_ok());
  EXPECT_FALSE(a.enable_prefix_caching);
}

}  // namespace
}  // namespace kvs
