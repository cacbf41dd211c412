// Engine-level behaviour on the real default model: batching, block sizes, prefix caching and
// preemption never change greedy output; the pool is sized by kv_geometry.
#include "engine/engine.h"
#include "engine/engine_test_util.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/kl_divergence.h"
#include "engine/perplexity.h"
#include "model/loaded_model.h"
#include "model/model_paths.h"
#include "support/tiny_model.h"

namespace kvs {
namespace {

using test::make_engine;
using test::run_all;
using test::tokens_of;

const char* kPrompts[] = {
    "The capital of France is",
    "<|im_start|>user\nWrite a haiku about memory.<|im_end|>\n<|im_start|>assistant\n",
    "def fibonacci(n):\n    ",
    "Once upon a time, in a small village by the sea, there lived",
};

// Needs an engine, not the default model's weights: the tiny synthetic model (the default
// model's own geometry is checked against the planner by cli_tests).
TEST(EngineTest, PoolIsSizedByKvGeometry) {
  LoadedModel* model = test::tiny_model();
  ASSERT_NE(model, nullptr);
  auto e = make_engine(*model, {.kv_cache_memory = 1ull << 20, .block_size = 16});
  // The tiny model: 2 layers x 2 x 2 KV heads x 32 x 2 bytes (f16) = 512 B per token.
  EXPECT_EQ(e->kv_pool().bytes_per_token, 512u);
  EXPECT_EQ(e->kv_pool().block_bytes, 512u * 16);
  EXPECT_EQ(e->kv_pool().num_blocks, (1ull << 20) / (512 * 16));
  EXPECT_EQ(e->snapshot().pool_bytes, e->kv_pool().pool_bytes);
  // int8 KV: one f16 scale per 32-element vector = 34 B per head vector.
  auto q = make_engine(*model, {.kv_cache_memory = 1ull << 20,
                                .block_size = 16,
                                .k_dtype = KvDtype::kInt8,
                                .v_dtype = KvDtype::kInt8});
  EXPECT_EQ(q->kv_pool().bytes_per_token, 2u * 2 * 2 * 34);
}

TEST(EngineTest, ParallelSequencesMatchSeparateRuns) {
  REQUIRE_MODEL();
  std::vector<std::vector<int32_t>> prompts;
  for (const char* p : kPrompts) prompts.push_back(tokens_of(*model, p));
  auto batched =
      make_engine(*model, {.kv_cache_memory = 64ull << 20, .enable_prefix_caching = false});
  const auto together = run_all(*batched, prompts, 12);
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto alone =
        make_engine(*model, {.kv_cache_memory = 64ull << 20, .enable_prefix_caching = false});
    EXPECT_EQ(run_all(*alone, {prompts[i]}, 12)[0], together[i]) << "prompt " << i;
  }
}

TEST(EngineTest, BlockSizeAndChunkingDoNotChangeOutput) {
  REQUIRE_MODEL();
  std::vector<std::vector<int32_t>> prompts;
  for (const char* p : kPrompts) prompts.push_back(tokens_of(*model, p));
  auto ref = make_engine(*model, {.kv_cache_memory = 64ull << 20, .block_size = 16});
  const auto expect = run_all(*ref, prompts, 10);
  for (uint32_t bs : {1u, 7u, 256u}) {
    auto e = make_engine(
        *model, {.kv_cache_memory = 64ull << 20, .block_size = bs, .max_num_batched_tokens = 5});
    EXPECT_EQ(run_all(*e, prompts, 10), expect) << "block size " << bs;
  }
}

TEST(EngineTest, PrefixCachingReusesBlocksWithoutChangingOutput) {
  REQUIRE_MODEL();
  std::string long_prompt = "<|im_start|>system\nYou are a careful assistant. ";
  for (int i = 0; i < 12; ++i)
    long_prompt += "Always answer briefly and cite the rule number " + std::to_string(i) + ". ";
  long_prompt +=
      "<|im_end|>\n<|im_start|>user\nWhat is two plus two?<|im_end|>\n<|im_start|>assistant\n";
  const auto p = tokens_of(*model, long_prompt);
  ASSERT_GT(p.size(), 100u);
  auto off = make_engine(*model, {.kv_cache_memory = 64ull << 20, .enable_prefix_caching = false});
  const auto expect = run_all(*off, {p}, 8);
  auto on = make_engine(*model, {.kv_cache_memory = 64ull << 20});
  std::vector<uint32_t> cached;
  const auto first = run_all(*on, {p}, 8, &cached);
  const auto second = run_all(*on, {p}, 8, &cached);
  EXPECT_EQ(first[0], expect[0]);
  EXPECT_EQ(second[0], expect[0]);
  EXPECT_EQ(cached[0], 0u);
  // The second run reuses every full block of the prompt (at least the last token is recomputed).
  EXPECT_EQ(cached[1], (p.size() - 1) / 16 * 16);
}

// Sequences whose prompts start with one cached system prompt of 700+ tokens decode together
// over the same physical prefix blocks, so the attention kernel reads those segments once for
// all of them (shared-prefix attention, kernels/attention_segments.h). Greedy outputs must be
// those of each prompt run alone without any sharing.
TEST(EngineTest, SharedPrefixAttentionKeepsOutputs) {
  REQUIRE_MODEL();
  std::string system = "<|im_start|>system\nYou are a careful assistant. ";
  for (int i = 0; i < 60; ++i)
    system += "Rule " + std::to_string(i) + ": answer briefly and never guess. ";
  system += "<|im_end|>\n";
  const char* questions[] = {"What is two plus two?", "Name a colour.", "Say hello.",
                             "What is a cache?"};
  std::vector<std::vector<int32_t>> prompts;
  for (const char* q : questions)
    prompts.push_back(tokens_of(
        *model, system + "<|im_start|>user\n" + q + "<|im_end|>\n<|im_start|>assistant\n"));
  ASSERT_GT(prompts[0].size(), 600u);  // at least two full attention segments shared
  auto shared = make_engine(*model, {.kv_cache_memory = 128ull << 20});
  std::vector<uint32_t> cached;
  run_all(*shared, {prompts[0]}, 1, &cached);  // caches the system prompt's blocks
  const auto together = run_all(*shared, prompts, 10, &cached);
  for (size_t i = 1; i < cached.size(); ++i) EXPECT_GT(cached[i], 512u) << "prompt " << i - 1;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto alone =
        make_engine(*model, {.kv_cache_memory = 128ull << 20, .enable_prefix_caching = false});
    EXPECT_EQ(run_all(*alone, {prompts[i]}, 10)[0], together[i]) << "prompt " << i;
  }
}

TEST(EngineTest, PreemptionUnderATightPoolKeepsOutputs) {
  REQUIRE_MODEL();
  std::vector<std::vector<int32_t>> prompts;
  for (int r = 0; r < 2; ++r)
    for (const char* p : kPrompts) prompts.push_back(tokens_of(*model, p));
  auto roomy = make_engine(*model, {.kv_cache_memory = 64ull << 20});
  const auto expect = run_all(*roomy, prompts, 24);
  // 8 blocks of 16 tokens: far fewer than 8 sequences x ~40 tokens need.
  auto tight = make_engine(*model, {.kv_cache_memory = 8ull * 16 * 23040, .block_size = 16});
  ASSERT_EQ(tight->kv_pool().num_blocks, 8u);
  EXPECT_EQ(run_all(*tight, prompts, 24), expect);
  EXPECT_GT(tight->num_preemptions(), 0u);
  EXPECT_EQ(tight->snapshot().cache.blocks_in_use, 0u);
}

// The step log (serve --step-log): a line per forward pass, in wall-clock order, whose chunks
// sample each generated token once and whose preemption counts add up to the engine's.
TEST(EngineTest, StepLogRecordsEveryStep) {
  REQUIRE_MODEL();
  std::vector<std::vector<int32_t>> prompts;
  for (const char* p : kPrompts) prompts.push_back(tokens_of(*model, p));
  auto tight = make_engine(*model, {.kv_cache_memory = 6ull * 16 * 23040, .block_size = 16});
  const std::string path = ::testing::TempDir() + "/kvserve_engine_step_log.jsonl";
  auto log = StepLog::open(path);
  ASSERT_TRUE(log.is_ok()) << log.status().to_string();
  tight->set_step_log(log->get());
  (void)run_all(*tight, prompts, 20);
  tight->set_step_log(nullptr);
  ASSERT_TRUE((*log)->close().is_ok());
  EXPECT_GT(tight->num_preemptions(), 0u);

  std::ifstream in(path);
  std::string line;
  uint64_t steps = 0, preempted = 0;
  double last_end = 0;
  std::map<uint64_t, uint32_t> sampled;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    ++steps;
    EXPECT_GE(j["start_s"].get<double>(), last_end);
    EXPECT_GE(j["end_s"].get<double>(), j["start_s"].get<double>());
    last_end = j["end_s"].get<double>();
    preempted += j["preempted_recompute"].get<uint64_t>() + j["preempted_swap"].get<uint64_t>();
    EXPECT_LE(j["blocks_in_use"].get<uint32_t>(), 6u);
    for (const auto& c : j["chunks"])
      if (c[4].get<int>() == 1) ++sampled[c[0].get<uint64_t>()];
  }
  EXPECT_EQ(steps, tight->counters().steps);
  EXPECT_EQ(preempted, tight->num_preemptions());
  ASSERT_EQ(sampled.size(), prompts.size());
  for (const auto& [seq, n] : sampled) EXPECT_EQ(n, 20u) << "seq " << seq;
  std::filesystem::remove(path);
  EXPECT_FALSE(StepLog::open("/nonexistent-dir/steps.jsonl").is_ok());
}

TEST(EngineTest, SameSeedSameText) {
  REQUIRE_MODEL();
  const auto p = tokens_of(*model, "Tell me a story about a robot.");
  auto sample = [&](uint64_t seed) {
    auto e = make_engine(*model, {.kv_cache_memory = 64ull << 20});
    auto id = e->add_request(
        {.prompt = p,
         .sampling = {.temperature = 0.9f, .top_k = 40, .top_p = 0.95f, .seed = seed},
         .max_tokens = 16,
         .ignore_eos = true});
    while (e->has_unfinished()) (void)e->step();
    const Sequence& s = e->sequence(*id);
    return std::vector<int32_t>(s.tokens.begin() + s.prompt_len, s.tokens.end());
  };
  EXPECT_EQ(sample(42), sample(42));
  EXPECT_NE(sample(42), sample(43));
}

TEST(EngineTest, PerplexityDoesNotDependOnBlockSizeOrChunking) {
  REQUIRE_MODEL();
  std::string text;
  for (int i = 0; i < 20; ++i)
    text += "The quick brown fox jumps over the lazy dog while the cat sleeps in the warm sun. ";
  const auto toks = model->tokenizer->encode(text, true, false);
  auto a = make_engine(*model, {.kv_cache_memory = 64ull << 20,
                                .block_size = 16,
                                .max_num_batched_tokens = 512,
                                .enable_prefix_caching = false});
  auto b = make_engine(*model, {.kv_cache_memory = 64ull << 20,
                                .block_size = 3,
                                .max_num_batched_tokens = 37,
                                .enable_prefix_caching = false});
  auto ra = compute_perplexity(*a, toks, 128, std::nullopt);
  auto rb = compute_perplexity(*b, toks, 128, std::nullopt);
  ASSERT_TRUE(ra.is_ok()) << ra.status().to_string();
  ASSERT_TRUE(rb.is_ok());
  EXPECT_GT(ra->scored_tokens, 0u);
  // Repetitive text is easy: the model should be confident.
  EXPECT_LT(ra->perplexity, 5.0);
  EXPECT_NEAR(ra->perplexity, rb->perplexity, 1e-3 * ra->perplexity);
  EXPECT_EQ(a->snapshot().cache.blocks_in_use, 0u);
}

TEST(EngineTest, PerplexityStartsEveryWindowWithTheBosItIsGiven) {
  // llama.cpp's method for models that add BOS: each window's first token becomes BOS. The same
  // numbers as windows edited by hand, and different from plain slices.
  REQUIRE_MODEL();
  std::string text;
  for (int i = 0; i < 12; ++i)
    text += "Rivers carry sand to the sea, and the sea returns it as rain over the hills. ";
  const auto toks = model->tokenizer->encode(text, true, false);
  const uint32_t ctx = 64;
  const int32_t bos = 1;  // any id: the comparison is exact either way
  std::vector<int32_t> edited = toks;
  for (size_t k = 0; k + ctx <= edited.size(); k += ctx) edited[k] = bos;
  const EngineConfig config{.kv_cache_memory = 64ull << 20, .enable_prefix_caching = false};
  auto a = make_engine(*model, config);
  auto b = make_engine(*model, config);
  auto c = make_engine(*model, config);
  auto with_bos = compute_perplexity(*a, toks, ctx, bos);
  auto by_hand = compute_perplexity(*b, edited, ctx, std::nullopt);
  auto plain = compute_perplexity(*c, toks, ctx, std::nullopt);
  ASSERT_TRUE(with_bos.is_ok() && by_hand.is_ok() && plain.is_ok());
  ASSERT_GE(with_bos->windows, 2u);
  EXPECT_EQ(with_bos->mean_nll, by_hand->mean_nll);
  EXPECT_NE(with_bos->mean_nll, plain->mean_nll);
}

// The KL divergence between two engines (engine/kl_divergence.h): exactly zero between two
// engines in the same format, positive and ordered by the formats' precision otherwise, the same
// whether the reference's windows are kept all at once or one at a time, and each engine's
// perplexity is compute_perplexity's.
TEST(EngineTest, KlDivergenceIsZeroForTheSameFormatAndGrowsAsTheFormatCoarsens) {
  REQUIRE_MODEL();
  std::string text;
  for (int i = 0; i < 10; ++i)
    text +=
        "A ledger of grain, salt and wool was kept at the mill; each season the miller "
        "wrote what came in and what went out, and his daughter checked the sums. ";
  const auto toks = model->tokenizer->encode(text, true, false);
  const uint32_t ctx = 64;
  const uint32_t windows = static_cast<uint32_t>(toks.size() / ctx);
  ASSERT_GE(windows, 3u);
  const auto engine = [&](KvDtype k, KvDtype v) {
    return make_engine(*model, {.kv_cache_memory = 64ull << 20,
                                .k_dtype = k,
                                .v_dtype = v,
                                .enable_prefix_caching = false});
  };
  auto ref = engine(KvDtype::kF32, KvDtype::kF32);
  auto same = engine(KvDtype::kF32, KvDtype::kF32);
  auto self = compute_kl_divergence(*ref, *same, toks, ctx, std::nullopt);
  ASSERT_TRUE(self.is_ok()) << self.status().to_string();
  EXPECT_EQ(self->scored_tokens, uint64_t{windows} * (ctx - 1 - ctx / 2));
  EXPECT_EQ(self->mean, 0.0);
  EXPECT_EQ(self->max, 0.0);
  EXPECT_EQ(self->same_top, 1.0);
  EXPECT_EQ(self->reference.perplexity, self->test.perplexity);

  auto q8 = engine(KvDtype::kQ8_0, KvDtype::kQ8_0);
  auto q2 = engine(KvDtype::kInt2Had, KvDtype::kInt2Had);
  auto k8 = compute_kl_divergence(*ref, *q8, toks, ctx, std::nullopt);
  auto k2 = compute_kl_divergence(*ref, *q2, toks, ctx, std::nullopt);
  ASSERT_TRUE(k8.is_ok() && k2.is_ok());
  EXPECT_GT(k8->mean, 0.0);
  EXPECT_GT(k2->mean, 10 * k8->mean);
  EXPECT_LE(k2->median, k2->p99);
  EXPECT_LE(k2->p99, k2->max);
  EXPECT_GT(k2->mean_stderr, 0.0);
  EXPECT_LT(k2->same_top, 1.0);
  EXPECT_GE(k8->same_top, k2->same_top);
  auto plain =
      compute_perplexity(*engine(KvDtype::kInt2Had, KvDtype::kInt2Had), toks, ctx, std::nullopt);
  ASSERT_TRUE(plain.is_ok());
  EXPECT_EQ(k2->test.perplexity, plain->perplexity);
  EXPECT_EQ(k2->reference.perplexity, self->reference.perplexity);

  // One window of reference rows at a time: the same numbers.
  auto one_at_a_time = compute_kl_divergence(*ref, *q2, toks, ctx, std::nullopt, {}, 1);
  ASSERT_TRUE(one_at_a_time.is_ok());
  EXPECT_EQ(one_at_a_time->mean, k2->mean);
  EXPECT_EQ(one_at_a_time->p99, k2->p99);
  EXPECT_EQ(one_at_a_time->same_top, k2->same_top);

  // Another model's vocabulary cannot be compared.
  LoadedModel* tiny = test::tiny_model();
  ASSERT_NE(tiny, nullptr);
  auto other = make_engine(*tiny, {.kv_cache_memory = 1ull << 20});
  auto mismatch = compute_kl_divergence(*ref, *other, toks, ctx, std::nullopt);
  ASSERT_FALSE(mismatch.is_ok());
  EXPECT_NE(mismatch.status().message().find("vocabularies"), std::string::npos);
}

}  // namespace
}  // namespace kvs
