// Every KV cache format through the engine on the real default model: prefix reuse, parallel
// sequences and preemption under a tight pool never change greedy output within a format (a
// cached prefix written in int8 is reused as int8, byte for byte), and the format is part of
// the prefix key.
#include <gtest/gtest.h>

#include <map>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "kvcache/block_hash.h"
#include "kvcache/kv_pool_plan.h"
#include "model/loaded_model.h"
#include "model/model_paths.h"

namespace kvs {
namespace {

using test::run_all;

using Formats = test::KvFormats;

class EngineKvFormatTest : public test::KvFormatEngineTest {};

TEST_P(EngineKvFormatTest, PrefixReuseKeepsOutput) {
  REQUIRE_MODEL();
  const auto p = test::long_chat_prompt(*model);
  auto off = make(*model, {.kv_cache_memory = 32ull << 20, .enable_prefix_caching = false});
  const auto expect = run_all(*off, {p}, 6);
  auto on = make(*model, {.kv_cache_memory = 32ull << 20});
  std::vector<uint32_t> cached;
  const auto first = run_all(*on, {p}, 6, &cached);
  const auto second = run_all(*on, {p}, 6, &cached);
  EXPECT_EQ(first[0], expect[0]);
  EXPECT_EQ(second[0], expect[0]);
  EXPECT_EQ(cached[0], 0u);
  EXPECT_EQ(cached[1], (p.size() - 1) / 16 * 16);
}

TEST_P(EngineKvFormatTest, ParallelAndPreemptedSequencesKeepOutput) {
  REQUIRE_MODEL();
  std::vector<std::vector<int32_t>> prompts;
  for (const char* t : {"The capital of France is", "def fibonacci(n):\n    ",
                        "Once upon a time, in a small village by the sea, there lived"})
    for (int r = 0; r < 2; ++r) prompts.push_back(model->tokenizer->encode(t, true, true));
  // One at a time: the reference for this format.
  std::vector<std::vector<int32_t>> expect;
  {
    auto e = make(*model, {.kv_cache_memory = 32ull << 20, .enable_prefix_caching = false});
    for (const auto& p : prompts) expect.push_back(run_all(*e, {p}, 16)[0]);
  }
  // All at once, in a pool of 5 blocks of 16 tokens: sequences are preempted and recomputed,
  // identical prompts share their cached blocks.
  const auto [k, v] = GetParam();
  const uint64_t block = kv_token_bytes(model->spec.kv_shape(k, v)).bytes_per_token * 16;
  // Per-channel keys: the partly filled groups' f16 keys come out of the budget first.
  const uint64_t tails = plan_kv_pool(model->spec.kv_model_shape(k, v), uint64_t{1} << 30, 16,
                                      EngineConfig{}.max_num_seqs)
                             ->key_tail_bytes;
  auto tight = make(*model, {.kv_cache_memory = 5 * block + tails});
  ASSERT_EQ(tight->kv_pool().num_blocks, 5u);
  EXPECT_EQ(run_all(*tight, prompts, 16), expect);
  EXPECT_GT(tight->num_preemptions(), 0u);
  EXPECT_EQ(tight->snapshot().cache.blocks_in_use, 0u);
}

// n greedy samples of one prompt fork after the prompt, sharing its partly filled last block
// copy-on-write: every sample must be the single sample's tokens. (Per-channel keys: the copy
// takes the group's f16 tail along, or its rows would be read back from the sealed bytes.)
TEST_P(EngineKvFormatTest, ForkedSamplesMatchOneSample) {
  REQUIRE_MODEL();
  const auto prompt = model->tokenizer->encode("Once upon a time, in a small village", true, true);
  ASSERT_NE(prompt.size() % 16, 0u);  // the last prompt block is partly filled
  auto one = make(*model, {.kv_cache_memory = 32ull << 20});
  const auto expect = run_all(*one, {prompt}, 12)[0];
  auto e = make(*model, {.kv_cache_memory = 32ull << 20});
  const auto samples = test::forked_samples(*e, prompt, 12, 3);
  ASSERT_EQ(samples.size(), 3u);
  for (const auto& [index, tokens] : samples) EXPECT_EQ(tokens, expect) << "sample " << index;
}

INSTANTIATE_TEST_SUITE_P(Formats, EngineKvFormatTest,
                         ::testing::Values(Formats{KvDtype::kBF16, KvDtype::kBF16},
                                           Formats{KvDtype::kFp8E4M3, KvDtype::kFp8E4M3},
                                           Formats{KvDtype::kFp8E5M2, KvDtype::kFp8E5M2},
                                           Formats{KvDtype::kFp8E4M3Dyn, KvDtype::kFp8E4M3Dyn},
                                           Formats{KvDtype::kInt8, KvDtype::kInt8},
                                           Formats{KvDtype::kInt4, KvDtype::kInt4},
                                           Formats{KvDtype::kQ8_0, KvDtype::kQ8_0},
                                           Formats{KvDtype::kQ4_0, KvDtype::kQ4_0},
                                           Formats{KvDtype::kInt8, KvDtype::kInt4},
                                           Formats{KvDtype::kInt4Had, KvDtype::kInt4Had},
                                           Formats{KvDtype::kInt8Had, KvDtype::kInt8Had},
                                           Formats{KvDtype::kQ8_0Had, KvDtype::kQ8_0Had},
                                           Formats{KvDtype::kInt4Chan, KvDtype::kInt4Had},
                                           Formats{KvDtype::kInt2Chan, KvDtype::kInt8},
                                           Formats{KvDtype::kInt3Chan, KvDtype::kInt3Had},
                                           Formats{KvDtype::kInt2Chan, KvDtype::kInt2Had}),
                         test::kv_formats_name);

// Keys per channel over 64 tokens (int4_chan64 .. int2_chan64) in blocks of 64 and 128: the
// same greedy output with and without a prefix hit (whole 64-token groups only), in any prefill
// chunking, and for every forked sample; and with a recent-token window.
class EngineChannel64Test : public test::KvFormatEngineTest {};

TEST_P(EngineChannel64Test, OutputDoesNotDependOnHitsChunkingOrForks) {
  REQUIRE_MODEL();
  auto p = test::long_chat_prompt(*model);
  p.insert(p.end(), p.begin() + 1, p.end());  // two chats: past two 128-token blocks
  ASSERT_GT(p.size(), 200u);
  for (const uint32_t bs : {64u, 128u}) {
    auto off =
        make(*model,
             {.kv_cache_memory = 128ull << 20, .block_size = bs, .enable_prefix_caching = false});
    const auto expect = run_all(*off, {p}, 8);
    auto on = make(*model, {.kv_cache_memory = 128ull << 20, .block_size = bs});
    std::vector<uint32_t> cached;
    EXPECT_EQ(run_all(*on, {p}, 8, &cached)[0], expect[0]) << bs;
    EXPECT_EQ(run_all(*on, {p}, 8, &cached)[0], expect[0]) << bs;
    EXPECT_EQ(cached[1], (p.size() - 1) / bs * bs) << bs;
    // A prompt sharing 100 tokens: one whole 64-token group from the cache, the rest computed.
    std::vector<int32_t> q(p.begin(), p.begin() + 100);
    q.push_back(p[200]);
    auto fresh =
        make(*model,
             {.kv_cache_memory = 128ull << 20, .block_size = bs, .enable_prefix_caching = false});
    EXPECT_EQ(run_all(*on, {q}, 8, &cached)[0], run_all(*fresh, {q}, 8)[0]) << bs;
    EXPECT_EQ(cached[2], 64u) << bs;
    auto chunked = make(*model, {.kv_cache_memory = 128ull << 20,
                                 .block_size = bs,
                                 .max_num_batched_tokens = 24,
                                 .enable_prefix_caching = false});
    EXPECT_EQ(run_all(*chunked, {p}, 8)[0], expect[0]) << bs;
    auto forks = make(*model, {.kv_cache_memory = 128ull << 20, .block_size = bs});
    const auto samples = test::forked_samples(*forks, p, 8, 3);
    ASSERT_EQ(samples.size(), 3u);
    for (const auto& [index, tokens] : samples) EXPECT_EQ(tokens, expect[0]) << "sample " << index;
  }
  // With a recent-token window (shorter or longer than a group): the same output with a prefix
  // hit and in small chunks as without.
  for (const uint32_t w : {32u, 128u}) {
    auto off = make(*model, {.kv_cache_memory = 256ull << 20,
                             .block_size = 64,
                             .enable_prefix_caching = false,
                             .recent_window = w});
    const auto expect = run_all(*off, {p}, 8);
    auto on = make(*model, {.kv_cache_memory = 256ull << 20, .block_size = 64, .recent_window = w});
    std::vector<uint32_t> cached;
    EXPECT_EQ(run_all(*on, {p}, 8, &cached)[0], expect[0]) << w;
    EXPECT_EQ(run_all(*on, {p}, 8, &cached)[0], expect[0]) << w;
    EXPECT_GT(cached[1], 0u) << w;
    auto chunked = make(*model, {.kv_cache_memory = 256ull << 20,
                                 .block_size = 64,
                                 .max_num_batched_tokens = 24,
                                 .enable_prefix_caching = false,
                                 .recent_window = w});
    EXPECT_EQ(run_all(*chunked, {p}, 8)[0], expect[0]) << w;
  }
  // A block size that is not a multiple of the group is refused with a clear error. (The
  // tails of 64 sequences' partly filled 64-token groups are 47 MB on this model: 128 MiB.)
  EngineConfig c{.kv_cache_memory = 128ull << 20, .block_size = 16, .threads = 2};
  c.k_dtype = GetParam().k;
  c.v_dtype = GetParam().v;
  auto bad = Engine::create(*model->model, c);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("multiple of 64"), std::string::npos)
      << bad.status().to_string();
}

INSTANTIATE_TEST_SUITE_P(Formats, EngineChannel64Test,
                         ::testing::Values(Formats{KvDtype::kInt4Chan64, KvDtype::kInt4Had},
                                           Formats{KvDtype::kInt3Chan64, KvDtype::kInt3Had},
                                           Formats{KvDtype::kInt2Chan64, KvDtype::kInt2Had},
                                           Formats{KvDtype::kInt2MixChan64, KvDtype::kInt2Had64},
                                           Formats{KvDtype::kInt2MixChan64, KvDtype::kInt2Tcq64}),
                         test::kv_formats_name);

TEST(KvFormatPrefixKeyTest, FormatIsPartOfThePrefixKey) {
  std::vector<uint64_t> keys;
  for (KvDtype k : all_kv_dtypes())
    for (KvDtype v : all_kv_dtypes()) keys.push_back(extra_keys_hash(1234, k, v));
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(std::unique(keys.begin(), keys.end()), keys.end());
}

}  // namespace
}  // namespace kvs
