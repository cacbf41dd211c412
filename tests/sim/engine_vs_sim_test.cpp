// The engine and the simulator run one step (StepDriver), so a trace must be scheduled the same
// by both: the same small trace (shared prefixes, prompts longer than a chunk, more requests
// than may run at once) through the real engine over the model and through `simulate --device
// cpu` over the same GGUF, compared step by step and chunk by chunk from their step logs. Run
// for SmolLM2 (every layer full attention) and Gemma 3 270M (sliding-window layers), where the
// simulator used to admit by its own, different rule.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/engine_test_util.h"
#include "sim/sim_test_util.h"
#include "sim/simulation.h"
#include "sim/token_synthesizer.h"
#include "support/prerequisites.h"

namespace kvs {
namespace {

namespace fs = std::filesystem;

Trace small_trace() {
  Trace t;
  t.block_tokens = 32;
  // All at t = 0: both runs see every request before their first step, whatever their clocks.
  // The last needs more blocks than either pool has once every layer group is counted (its
  // footprint), though its tokens fit the pool's token count: both must reject it.
  const std::vector<std::pair<uint32_t, uint32_t>> lens = {{150, 6}, {96, 9}, {210, 4}, {64, 12},
                                                           {180, 5}, {40, 8}, {380, 20}};
  for (size_t i = 0; i < lens.size(); ++i) {
    TraceRequest r{.arrival_s = 0, .input_tokens = lens[i].first, .output_tokens = lens[i].second};
    // Requests 0, 2 and 4 share their first two 32-token blocks; 1 and 3 their first one.
    if (i % 2 == 0) r.hash_ids = {1, 2, 100 + i};
    if (i == 1 || i == 3) r.hash_ids = {7, 200 + i};
    t.requests.push_back(r);
  }
  t.source = "engine_vs_sim_test";
  return t;
}

// Requests 0 and 6 share their first two 32-token blocks; 1-5 start with tokens of their own.
// With three sequences at once the attention sink's table holds three first tokens, so by the
// time request 6 is admitted its first token is forgotten: both runs must refuse its hit.
Trace start_token_trace() {
  Trace t;
  t.block_tokens = 32;
  for (uint32_t i = 0; i < 7; ++i) {
    TraceRequest r{.arrival_s = 0, .input_tokens = i % 6 == 0 ? 96u : 40u, .output_tokens = 4};
    if (i % 6 == 0) r.hash_ids = {1, 2, 100 + i};
    t.requests.push_back(r);
  }
  t.source = "engine_vs_sim_test";
  return t;
}

// Each step's chunks ([seq, first_pos, num_tokens, prompt_len, samples] ...) from a step log.
std::vector<nlohmann::json> steps_of(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line).at("chunks"));
  return out;
}

std::string model_file(const std::string& name) { return default_model_dir() + "/" + name; }

// The engine's KV formats and recent-token window (default: f16, none).
struct KvChoice {
  std::string k_dtype, v_dtype;  // "" = f16
  uint32_t recent_window = 0;
  bool attention_sink = false;
};

// The trace through both; `rejected` of its requests must be rejected by both. `snapshot`: the
// engine's after the run (null: not wanted).
void compare(const std::string& model_name, const KvChoice& kv = {},
             const Trace& trace = small_trace(), uint64_t rejected = 1,
             EngineSnapshot* snapshot = nullptr) {
  const std::string path = model_file(model_name);
  if (!fs::exists(path)) SKIP_OR_FAIL_IN_CI() << path << " missing: run scripts/fetch-model";
  test::use_source_data_dir();
  char dir_tmpl[] = "/tmp/kvs-engine-vs-sim-XXXXXX";
  const std::string dir = ::mkdtemp(dir_tmpl);
  const std::string sim_log = dir + "/sim.jsonl", engine_log = dir + "/engine.jsonl";

  SimArgs a;
  a.hw.model = path;
  a.device = "cpu";
  a.kv_cache_memory = "6MiB";  // tight: requests wait for blocks
  a.max_num_seqs = 3;
  a.max_num_batched_tokens = 64;  // prompts run in chunks
  a.hw.k_dtype = kv.k_dtype;
  a.hw.v_dtype = kv.v_dtype;
  a.recent_window = kv.recent_window;
  a.attention_sink = kv.attention_sink;
  const SimSetup setup = test::resolve_or_die(a);
  uint64_t sim_rejected = 0, engine_rejected = 0;
  {
    auto log = StepLog::open(sim_log);
    ASSERT_TRUE(log.is_ok());
    auto r = run_simulation(setup, trace, log->get());
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    sim_rejected = r->summary.rejected;
    EXPECT_EQ(r->summary.completed + r->summary.rejected, trace.requests.size());
    EXPECT_GE(r->summary.completed, trace.requests.size() - rejected);
  }

  auto loaded = load_model(path);
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
  EngineConfig c{.kv_cache_memory = 6 << 20,
                 .block_size = a.block_size,
                 .max_num_batched_tokens = a.max_num_batched_tokens,
                 .max_num_seqs = a.max_num_seqs,
                 .max_model_len = setup.max_model_len};
  if (!kv.k_dtype.empty()) c.k_dtype = *parse_kv_dtype(kv.k_dtype);
  if (!kv.v_dtype.empty()) c.v_dtype = *parse_kv_dtype(kv.v_dtype);
  c.recent_window = kv.recent_window;
  c.attention_sink = kv.attention_sink;
  auto engine = test::make_engine(*loaded, c);
  ASSERT_EQ(engine->kv_pool().num_blocks, setup.pool.num_blocks) << "the planner's pool differs";
  EXPECT_EQ(engine->kv_pool().key_tail_bytes, setup.pool.key_tail_bytes);
  EXPECT_EQ(engine->kv_pool().recent_window_bytes, setup.pool.recent_window_bytes);
  {
    auto log = StepLog::open(engine_log);
    ASSERT_TRUE(log.is_ok());
    engine->set_step_log(log->get());
    const TokenSynthesizer tokens(trace, setup.vocab_size);
    for (size_t i = 0; i < trace.requests.size(); ++i) {
      SequenceRequest req;
      tokens.prompt(i, &req.prompt);
      req.max_tokens = trace.requests[i].output_tokens;
      req.ignore_eos = true;
      if (!engine->add_request(std::move(req)).is_ok()) ++engine_rejected;
    }
    while (engine->has_unfinished()) (void)engine->step();
    engine->set_step_log(nullptr);
  }

  EXPECT_EQ(engine_rejected, rejected);
  EXPECT_EQ(sim_rejected, engine_rejected);
  const std::vector<nlohmann::json> sim = steps_of(sim_log), eng = steps_of(engine_log);
  ASSERT_GT(sim.size(), 10u);
  ASSERT_EQ(eng.size(), sim.size());
  for (size_t i = 0; i < sim.size(); ++i) ASSERT_EQ(eng[i], sim[i]) << "step " << i;
  fs::remove_all(dir);
  if (snapshot != nullptr) *snapshot = engine->snapshot();
}

TEST(EngineVsSimulationTest, AFullAttentionModelIsScheduledAlikeStepByStep) {
  compare("SmolLM2-135M-Instruct.Q4_1.gguf");
}

TEST(EngineVsSimulationTest, ASlidingWindowModelIsScheduledAlikeStepByStep) {
  compare("gemma-3-270m-q4_k_m.gguf");
}

// Per-channel keys (their f16 tails) and a recent-token window (its rings, and prefix hits that
// stop at each sequence's window floor) change both the pool and the schedule: the simulator
// used to size its pool without them.
TEST(EngineVsSimulationTest, PerChannelKeysAndARecentWindowAreScheduledAlike) {
  compare("SmolLM2-135M-Instruct.Q4_1.gguf", {"int4_chan", "int4_had", 32});
}

// The attention sink's rows come out of the pool in both.
TEST(EngineVsSimulationTest, AnAttentionSinkIsScheduledAlike) {
  compare("SmolLM2-135M-Instruct.Q4_1.gguf", {"int4_chan", "int4_had", 32, true});
}

// Both refuse a prefix hit whose first token the sink's table forgot (the simulator used to
// grant every hit).
TEST(EngineVsSimulationTest, ARefusedSinkHitIsScheduledAlike) {
  EngineSnapshot s;
  compare("SmolLM2-135M-Instruct.Q4_1.gguf", {"int4_chan", "int4_had", 32, true},
          start_token_trace(), 0, &s);
  if (!HasFatalFailure() && !IsSkipped()) {
    EXPECT_GT(s.attention_sink_refused_hits, 0u);
  }
}

}  // namespace
}  // namespace kvs
