// The attention sink (`--kv-attention-sink`, quant/attention_sink.h) through the engine on the
// real default model: position 0 is read in f16 by every query, from rows that are a function of
// the first token alone, so greedy output does not change with the prefill chunk, prefix hits
// (whose first token's rows come from the sink's table), the table forgetting a token (the hit
// is then refused), preemption under a tight pool or forked samples; the sink changes what the
// model computes; its bytes are the plan's; and it needs a window.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "kvcache/kv_pool_plan.h"
#include "model/loaded_model.h"
#include "model/model_paths.h"
#include "quant/recent_window.h"

namespace kvs {
namespace {

using test::run_all;

constexpr uint32_t kWindow = 32;

using Formats = test::KvFormats;

class EngineAttentionSinkTest : public test::KvFormatEngineTest {
 protected:
  EngineConfig sink_config(uint32_t memory_mib = 256) {
    return {.kv_cache_memory = uint64_t{memory_mib} << 20,
            .recent_window = kWindow,
            .attention_sink = true};
  }
};

// A prefix hit adopts the first token's rows from the sink's table.
TEST_P(EngineAttentionSinkTest, ChunksAndPrefixHitsKeepOutput) {
  REQUIRE_MODEL();
  test::expect_chunks_and_hits_keep_output(*model, sink_config(),
                                           [&](const EngineConfig& c) { return make(*model, c); });
}

// With one sequence the table holds one start token: a prompt that starts with another token
// takes its place, and a prompt whose blocks are cached but whose first token the table forgot
// computes from position 0 (no hit), with the same output.
TEST_P(EngineAttentionSinkTest, ForgottenStartTokenRefusesTheHit) {
  REQUIRE_MODEL();
  const auto p = test::long_chat_prompt(*model);
  const auto other = test::tokens_of(
      *model, "Once upon a time, in a small village by the sea, there lived an old fisherman who");
  ASSERT_NE(p[0], other[0]);
  EngineConfig c = sink_config();
  c.max_num_seqs = 1;
  auto e = make(*model, c);
  std::vector<uint32_t> cached;
  const auto expect = run_all(*e, {p}, 16, &cached)[0];
  (void)run_all(*e, {other}, 4, &cached);
  EXPECT_EQ(run_all(*e, {p}, 16, &cached)[0], expect);
  EXPECT_EQ(run_all(*e, {p}, 16, &cached)[0], expect);
  ASSERT_EQ(cached.size(), 4u);
  EXPECT_EQ(cached[2], 0u);  // forgotten: computed again
  EXPECT_GT(cached[3], 0u);  // known again
  EXPECT_EQ(e->snapshot().attention_sink_refused_hits, 1u);
  EXPECT_TRUE(e->check_integrity().is_ok());
}

TEST_P(EngineAttentionSinkTest, ParallelPreemptedAndForkedSequencesKeepOutput) {
  REQUIRE_MODEL();
  std::vector<std::vector<int32_t>> prompts;
  for (const char* t : {"The capital of France is", "def fibonacci(n):\n    ",
                        "Once upon a time, in a small village by the sea, there lived"})
    for (int r = 0; r < 2; ++r) prompts.push_back(test::tokens_of(*model, t));
  std::vector<std::vector<int32_t>> expect;
  {
    EngineConfig c = sink_config();
    c.enable_prefix_caching = false;
    auto e = make(*model, c);
    for (const auto& p : prompts) expect.push_back(run_all(*e, {p}, 40)[0]);
  }
  const auto [k, v] = GetParam();
  const KvPoolPlan plan = *plan_kv_pool(model->spec.kv_model_shape(k, v), uint64_t{1} << 30, 16,
                                        EngineConfig{}.max_num_seqs, kWindow, true);
  EngineConfig tight_config = sink_config();
  tight_config.kv_cache_memory =
      6 * plan.block_bytes + plan.key_tail_bytes + plan.recent_window_bytes;
  auto tight = make(*model, tight_config);
  ASSERT_EQ(tight->kv_pool().num_blocks, 6u);
  EXPECT_EQ(run_all(*tight, prompts, 40), expect);
  EXPECT_GT(tight->num_preemptions(), 0u);
  EXPECT_TRUE(tight->check_integrity().is_ok());
  // Three samples forked after the prompt read their parent's rows.
  auto e = make(*model, sink_config());
  const auto samples = test::forked_samples(*e, prompts[4], 40, 3);
  ASSERT_EQ(samples.size(), 3u);
  const auto one = run_all(*make(*model, sink_config()), {prompts[4]}, 40)[0];
  for (const auto& [index, tokens] : samples) EXPECT_EQ(tokens, one) << "sample " << index;
}

double score(LoadedModel& m, KvDtype k, KvDtype v, uint32_t window, bool sink) {
  return test::score_long_chat_prompt(m, k, v, window, sink);
}

// The sink is read (the score moves) and counted (the pool is the plan's, to the byte); a window
// over the whole prompt already reads position 0 in f16, so there the sink changes nothing.
TEST_P(EngineAttentionSinkTest, SinkIsReadAndCounted) {
  REQUIRE_MODEL();
  const auto [k, v] = GetParam();
  EXPECT_NE(score(*model, k, v, kWindow, true), score(*model, k, v, kWindow, false));
  EXPECT_EQ(score(*model, k, v, 256, true), score(*model, k, v, 256, false));
  auto e = make(*model, sink_config());
  const KvPoolPlan plan = *plan_kv_pool(model->spec.kv_model_shape(k, v), 256ull << 20, 16,
                                        EngineConfig{}.max_num_seqs, kWindow, true);
  EXPECT_TRUE(plan.attention_sink);
  EXPECT_EQ(e->kv_pool().recent_window_bytes, plan.recent_window_bytes);
  EXPECT_EQ(e->kv_pool().num_blocks, plan.num_blocks);
  const auto& spec = model->spec;
  // The rings of W + 16 rows and two sink rows per sequence (its own and a table entry).
  EXPECT_EQ(plan.recent_window_bytes, uint64_t{EngineConfig{}.max_num_seqs} * spec.n_layers *
                                          spec.n_kv_heads * (kWindow + 16 + 2) * spec.head_dim * 4);
  EXPECT_EQ(e->snapshot().recent_window_bytes, plan.recent_window_bytes);
}

INSTANTIATE_TEST_SUITE_P(Formats, EngineAttentionSinkTest,
                         ::testing::Values(Formats{KvDtype::kInt4Had, KvDtype::kInt4Had},
                                           Formats{KvDtype::kInt2Chan, KvDtype::kInt2Had}),
                         test::kv_formats_name);

TEST(EngineAttentionSinkConfigTest, NeedsAWindow) {
  REQUIRE_MODEL();
  auto e = Engine::create(*model->model, {.kv_cache_memory = 256ull << 20,
                                          .k_dtype = KvDtype::kInt2Chan,
                                          .v_dtype = KvDtype::kInt2Had,
                                          .attention_sink = true});
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("--kv-attention-sink needs --kv-recent-window"),
            std::string::npos)
      << e.status().message();
}

}  // namespace
}  // namespace kvs
