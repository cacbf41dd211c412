// The hit rate is exact: with a pool that never evicts, the engine's prefix cache reuses exactly
// the prompt tokens the trace says are shared, no more, no less. The expectation is computed here
// from the hash ids alone (no tokens, no cache): per request, the longest prefix shared with any
// earlier request (block by block: a block shares min(its fill, the largest fill seen for that
// chain of ids)), capped at prompt - 1 tokens (the engine always recomputes the last prompt token)
// and rounded down to whole engine blocks (the hits the engine counts as whole cached blocks).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <vector>

#include "sim/sim_test_util.h"
#include "sim/simulation.h"
#include "sim/trace_generator.h"
#include "sim/trace_parsers.h"

namespace kvs {
namespace {

struct Expected {
  uint64_t query = 0;
  uint64_t hits = 0;
};

Expected intrinsic_reuse(const Trace& t, uint32_t engine_block) {
  const uint32_t hb = t.block_tokens;
  std::map<std::vector<uint64_t>, uint32_t> fill_seen;  // id chain -> largest fill seen
  Expected e;
  for (const TraceRequest& r : t.requests) {
    uint64_t shared = 0;
    std::vector<uint64_t> chain;
    bool sharing = true;
    for (size_t k = 0; k < r.hash_ids.size(); ++k) {
      chain.push_back(r.hash_ids[k]);
      const uint32_t fill = static_cast<uint32_t>(std::min<uint64_t>(hb, r.input_tokens - k * hb));
      auto it = fill_seen.find(chain);
      if (sharing) {
        const uint32_t s = it == fill_seen.end() ? 0 : std::min(fill, it->second);
        shared += s;
        sharing = s == hb;
      }
      if (it == fill_seen.end())
        fill_seen.emplace(chain, fill);
      else
        it->second = std::max(it->second, fill);
    }
    const uint64_t cap = std::min<uint64_t>(shared, r.input_tokens - 1);
    e.query += r.input_tokens;
    e.hits += cap / engine_block * engine_block;
  }
  return e;
}

class HitRate : public ::testing::Test {
 protected:
  void SetUp() override { test::use_source_data_dir(); }

  // Runs `t` with a never-evicting pool; checks the hits against the independent count.
  static SimResult check_exact(const Trace& t, SimArgs a) {
    a.kv_cache_memory = test::pool_for_whole_trace(t, a.block_size);
    a.max_model_len = 1u << 20;
    const SimSetup setup = test::resolve_or_die(a);
    auto r = run_simulation(setup, t);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    const Expected e = intrinsic_reuse(t, a.block_size);
    const SimSummary& m = r->summary;
    EXPECT_EQ(m.completed, t.requests.size());
    EXPECT_EQ(m.evictions, 0u);
    EXPECT_EQ(m.preemptions_recompute + m.preemptions_swap, 0u);
    EXPECT_EQ(m.prefix_query_tokens, e.query);
    EXPECT_EQ(m.prefix_hit_tokens, e.hits);
    EXPECT_DOUBLE_EQ(m.prefix_cache_hit_rate, static_cast<double>(e.hits) / e.query);
    EXPECT_EQ(r->first_token_wraps, 0u);
    return std::move(r).value();
  }
};

TEST_F(HitRate, EqualsTheTracesReuseOnGeneratedConversations) {
  const Trace t = generate_trace({.requests = 300, .rate_per_s = 4, .seed = 7});
  SimArgs a = test::llama_h100_args();
  const SimResult r = check_exact(t, a);
  EXPECT_GT(r.summary.prefix_cache_hit_rate, 0.3);  // the generator's conversations do share
}

TEST_F(HitRate, ExactForEveryBlockSizeAndUnderSchedulingPressure) {
  // Bursty arrivals, a small token budget (long prefills are chunked, later prompts wait for
  // blocks in flight), few running sequences, and engine blocks that do not divide the trace's
  // blocks (100 tokens), so engine blocks straddle the points where sharing ends.
  Trace t = generate_trace({.requests = 200, .rate_per_s = 50, .block_tokens = 100, .seed = 3});
  for (uint32_t bs : {16u, 32u, 24u}) {
    SimArgs a = test::llama_h100_args();
    a.block_size = bs;
    a.max_num_batched_tokens = 256;
    a.max_num_seqs = 8;
    check_exact(t, a);
  }
}

TEST_F(HitRate, ZeroWithPrefixCachingOff) {
  const Trace t = generate_trace({.requests = 60, .seed = 5});
  SimArgs a = test::llama_h100_args();
  a.enable_prefix_caching = false;
  a.kv_cache_memory = test::pool_for_whole_trace(t, 16);
  auto r = run_simulation(test::resolve_or_die(a), t);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->summary.prefix_hit_tokens, 0u);
  EXPECT_EQ(r->summary.prefix_cache_hit_rate, 0.0);
}

// The Mooncake conversation trace, when this checkout sits next to the shared data (read in
// place, never copied): its first requests, exact as well. The traces are outside the repository
// and no install step can fetch them, so a clone elsewhere skips this one test even under CI;
// the synthetic traces above cover the same rule.
TEST_F(HitRate, EqualsTheMooncakeTracesReuse) {
  const std::string path =
      KVSERVE_TEST_DATA_DIR "/../../../shared/data/traces/mooncake_conversation_trace.jsonl";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path;
  auto t = load_trace(path, TraceFormat::kMooncakeJsonl);
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  truncate_trace(*t, 400);
  const SimResult r = check_exact(*t, test::llama_h100_args());
  EXPECT_GT(r.summary.prefix_cache_hit_rate, 0.1);
}

}  // namespace
}  // namespace kvs
