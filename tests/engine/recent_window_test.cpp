// The recent-token window (`--kv-recent-window`, quant/recent_window.h) through the engine on the
// real default model: what a sequence reads in f16 depends on its own tokens only, so greedy
// output does not change with the prefill chunk, prefix hits (capped at the window floor),
// preemption under a tight pool, or forked samples; the window changes what the model computes
// (it is read); its bytes are the plan's; and what cannot keep it exact is refused.
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

class EngineRecentWindowTest : public test::KvFormatEngineTest {};

TEST_P(EngineRecentWindowTest, ChunksAndPrefixHitsKeepOutput) {
  REQUIRE_MODEL();
  test::expect_chunks_and_hits_keep_output(
      *model, {.kv_cache_memory = 256ull << 20, .recent_window = kWindow},
      [&](const EngineConfig& c) { return make(*model, c); });
}

// A shorter prompt's blocks were computed reading its window (its floor is lower): a longer prompt
// that starts the same way must not take them, or its output would depend on what ran before.
TEST_P(EngineRecentWindowTest, BlocksComputedInAWindowAreNotReused) {
  REQUIRE_MODEL();
  const auto p = test::long_chat_prompt(*model);
  const std::vector<int32_t> head(p.begin(), p.begin() + 40);
  auto cold = make(*model, {.kv_cache_memory = 256ull << 20, .recent_window = kWindow});
  const auto expect = run_all(*cold, {p}, 24)[0];
  auto e = make(*model, {.kv_cache_memory = 256ull << 20, .recent_window = kWindow});
  std::vector<uint32_t> cached;
  (void)run_all(*e, {head}, 8, &cached);
  EXPECT_EQ(run_all(*e, {p}, 24, &cached)[0], expect);
  ASSERT_EQ(cached.size(), 2u);
  EXPECT_EQ(cached[1], 0u);  // the head's floor is 0: none of its blocks is reusable
}

TEST_P(EngineRecentWindowTest, ParallelAndPreemptedSequencesKeepOutput) {
  REQUIRE_MODEL();
  std::vector<std::vector<int32_t>> prompts;
  for (const char* t : {"The capital of France is", "def fibonacci(n):\n    ",
                        "Once upon a time, in a small village by the sea, there lived"})
    for (int r = 0; r < 2; ++r) prompts.push_back(model->tokenizer->encode(t, true, true));
  std::vector<std::vector<int32_t>> expect;
  {
    auto e = make(*model, {.kv_cache_memory = 256ull << 20,
                           .enable_prefix_caching = false,
                           .recent_window = kWindow});
    for (const auto& p : prompts) expect.push_back(run_all(*e, {p}, 40)[0]);
  }
  // All at once in a pool of 6 blocks: sequences are preempted and recomputed (their slots
  // freed and taken again), identical prompts share cached blocks below their floors.
  const auto [k, v] = GetParam();
  const KvPoolPlan plan = *plan_kv_pool(model->spec.kv_model_shape(k, v), uint64_t{1} << 30, 16,
                                        EngineConfig{}.max_num_seqs, kWindow);
  auto tight = make(*model, {.kv_cache_memory = 6 * plan.block_bytes + plan.key_tail_bytes +
                                                plan.recent_window_bytes,
                             .recent_window = kWindow});
  ASSERT_EQ(tight->kv_pool().num_blocks, 6u);
  EXPECT_EQ(run_all(*tight, prompts, 40), expect);
  EXPECT_GT(tight->num_preemptions(), 0u);
  EXPECT_TRUE(tight->check_integrity().is_ok());
}

TEST_P(EngineRecentWindowTest, ForkedSamplesMatchOneSample) {
  REQUIRE_MODEL();
  const auto prompt = model->tokenizer->encode("Once upon a time, in a small village", true, true);
  auto one = make(*model, {.kv_cache_memory = 256ull << 20, .recent_window = kWindow});
  const auto expect = run_all(*one, {prompt}, 40)[0];
  auto e = make(*model, {.kv_cache_memory = 256ull << 20, .recent_window = kWindow});
  const auto samples = test::forked_samples(*e, prompt, 40, 3);
  ASSERT_EQ(samples.size(), 3u);
  for (const auto& [index, tokens] : samples) EXPECT_EQ(tokens, expect) << "sample " << index;
}

// The prompt's score under a quantized pool, with a window of `window` tokens.
double score(LoadedModel& m, KvDtype k, KvDtype v, uint32_t window) {
  return test::score_long_chat_prompt(m, k, v, window, /*attention_sink=*/false);
}

// A window over the whole prompt (its floor is 0, its size beyond the prompt) leaves nothing to
// read from the pool: every pool format scores the same, to the bit (formats whose V is not
// rotated, so that the window's sums are the very same operations).
TEST(EngineRecentWindowScoreTest, WholeWindowScoresAlikeInEveryFormat) {
  REQUIRE_MODEL();
  ASSERT_LT(test::long_chat_prompt(*model).size(), 256u);
  const double f16 = score(*model, KvDtype::kF16, KvDtype::kF16, 256);
  EXPECT_EQ(score(*model, KvDtype::kInt2Chan, KvDtype::kInt8, 256), f16);
  EXPECT_EQ(score(*model, KvDtype::kInt4Had, KvDtype::kQ8_0, 256), f16);
  EXPECT_NE(score(*model, KvDtype::kInt2Chan, KvDtype::kInt8, 0), f16);
}

// A window is read (the score moves) and counted (the pool is the plan's, to the byte).
TEST_P(EngineRecentWindowTest, WindowIsReadAndCounted) {
  REQUIRE_MODEL();
  const auto [k, v] = GetParam();
  EXPECT_NE(score(*model, k, v, kWindow), score(*model, k, v, 0));
  // The engine's pool is the plan's: rings for max_num_seqs sequences before the blocks.
  auto e = make(*model, {.kv_cache_memory = 256ull << 20, .recent_window = kWindow});
  const KvPoolPlan plan = *plan_kv_pool(model->spec.kv_model_shape(k, v), 256ull << 20, 16,
                                        EngineConfig{}.max_num_seqs, kWindow);
  EXPECT_EQ(e->kv_pool().recent_window_bytes, plan.recent_window_bytes);
  EXPECT_EQ(e->kv_pool().num_blocks, plan.num_blocks);
  const auto& spec = model->spec;
  EXPECT_EQ(plan.recent_window_bytes, uint64_t{EngineConfig{}.max_num_seqs} * spec.n_layers *
                                          spec.n_kv_heads * (kWindow + 16) * spec.head_dim * 4);
  EXPECT_EQ(plan.num_blocks,
            ((256ull << 20) - plan.key_tail_bytes - plan.recent_window_bytes) / plan.block_bytes);
  EXPECT_EQ(e->snapshot().recent_window_bytes, plan.recent_window_bytes);
}

INSTANTIATE_TEST_SUITE_P(Formats, EngineRecentWindowTest,
                         ::testing::Values(Formats{KvDtype::kInt4Had, KvDtype::kInt4Had},
                                           Formats{KvDtype::kInt3Chan, KvDtype::kInt3Had},
                                           Formats{KvDtype::kInt2Chan, KvDtype::kInt2Had}),
                         test::kv_formats_name);

// --kv-recent-window-dtype int8, with the 2-bit pair that needs it (docs/kv-quantization.md): the
// output keeps to chunking, prefix hits and forks; the rows are int8 (the score moves from the f16
// rows', and a whole-prompt window is no longer every format's score); the rings are the plan's,
// head_dim + 2 B a row.
TEST(EngineRecentWindowInt8Test, Int8RowsKeepOutputAndAreCounted) {
  REQUIRE_MODEL();
  EngineConfig base{.kv_cache_memory = 256ull << 20,
                    .block_size = 64,
                    .k_dtype = KvDtype::kInt2MixChan64,
                    .v_dtype = KvDtype::kInt2Had64,
                    .threads = 2};
  base.recent_window = kWindow;
  base.recent_window_dtype = KvDtype::kInt8;
  base.attention_sink = true;
  const auto make_one = [&](const EngineConfig& c) { return test::make_engine(*model, c); };
  test::expect_chunks_and_hits_keep_output(*model, base, make_one);
  const auto prompt = model->tokenizer->encode("Once upon a time, in a small village", true, true);
  const auto expect = run_all(*make_one(base), {prompt}, 40)[0];
  const auto samples = test::forked_samples(*make_one(base), prompt, 40, 3);
  ASSERT_EQ(samples.size(), 3u);
  for (const auto& [index, tokens] : samples) EXPECT_EQ(tokens, expect) << "sample " << index;
  auto e = make_one(base);
  const KvPoolPlan plan =
      *plan_kv_pool(model->spec.kv_model_shape(base.k_dtype, base.v_dtype), 256ull << 20, 64,
                    EngineConfig{}.max_num_seqs, kWindow, true, KvDtype::kInt8);
  EXPECT_EQ(e->kv_pool().recent_window_bytes, plan.recent_window_bytes);
  EXPECT_EQ(e->kv_pool().num_blocks, plan.num_blocks);
  const auto& spec = model->spec;
  const uint64_t rows = uint64_t{EngineConfig{}.max_num_seqs} * spec.n_layers * spec.n_kv_heads;
  EXPECT_EQ(plan.recent_window_bytes,
            rows * (kWindow + 16) * (spec.head_dim + 2) * 2 + rows * 2 * spec.head_dim * 2 * 2);
  // The rows are read as int8: the prompt scores otherwise than with f16 rows, and a window over
  // the whole prompt no longer scores as f16 KV does (it did with f16 rows, the test above).
  const auto score = [&](KvDtype k, KvDtype v, uint32_t window, KvDtype rows) {
    return test::score_long_chat_prompt(*model, k, v, window, true, rows, 64);
  };
  EXPECT_NE(score(base.k_dtype, base.v_dtype, kWindow, KvDtype::kInt8),
            score(base.k_dtype, base.v_dtype, kWindow, KvDtype::kF16));
  EXPECT_NE(score(KvDtype::kF16, KvDtype::kF16, 256, KvDtype::kInt8),
            score(KvDtype::kF16, KvDtype::kF16, 256, KvDtype::kF16));
  // A row format other than f16 or int8 is refused with the flag's name.
  EngineConfig bad = base;
  bad.recent_window_dtype = KvDtype::kInt4;
  auto refused = Engine::create(*model->model, bad);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("--kv-recent-window-dtype"), std::string::npos);
}

TEST(EngineRecentWindowConfigTest, RefusesWhatCannotKeepItExact) {
  REQUIRE_MODEL();
  EngineConfig c{.kv_cache_memory = 256ull << 20,
                 .k_dtype = KvDtype::kInt2Chan,
                 .v_dtype = KvDtype::kInt2Had,
                 .preemption_mode = PreemptionMode::kSwap,
                 .recent_window = kWindow,
                 .swap_space = 16ull << 20};
  auto swap = Engine::create(*model->model, c);
  ASSERT_FALSE(swap.is_ok());
  EXPECT_NE(swap.status().message().find("--kv-recent-window needs --preemption-mode recompute"),
            std::string::npos)
      << swap.status().message();
  EXPECT_NE(swap.status().message().find("--kv-recent-window needs --preemption-mode recompute"),
            std::string::npos);
  c.preemption_mode = PreemptionMode::kRecompute;
  c.recent_window = 24;
  auto odd = Engine::create(*model->model, c);
  ASSERT_FALSE(odd.is_ok());
  EXPECT_NE(odd.status().message().find("multiple of 16"), std::string::npos);
  c.recent_window = kWindow;
  c.max_num_seqs = 2;
  auto e = Engine::create(*model->model, c);
  ASSERT_TRUE(e.is_ok());
  auto many = (*e)->add_request({.prompt = {1, 2, 3}, .max_tokens = 4, .n = 3});
  ASSERT_FALSE(many.is_ok());
  EXPECT_NE(many.status().message().find("--max-num-seqs"), std::string::npos);
}

}  // namespace
}  // namespace kvs
