// Per-layer K/V formats (`--kv-cache-dtype-k-layers`, `--kv-cache-dtype-v-layers`,
// quant/kv_layer_formats.h) through the engine on the real default model: listing every layer
// is the pool in that format, bit for bit; a mixed pool keeps its greedy output under chunking,
// prefix hits, preemption and forks; the listed layers take loss away; the pool is the planner's
// to the byte; the disk tier keeps mixed and uniform pools' blocks apart; bad lists are clear
// errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "kvcache/block_hash.h"
#include "kvcache/kv_pool_plan.h"
#include "quant/recent_window.h"

namespace kvs {
namespace {

using test::make_engine;
using test::run_all;

// SmolLM2's 30 layers: the 2-bit pair with the keys of layers 18 and 20 and the values of
// layer 1 at 4 bits (docs/kv-quantization.md, "Per-layer formats").
EngineConfig mixed_config() {
  EngineConfig c{.kv_cache_memory = 64ull << 20,
                 .k_dtype = KvDtype::kInt2Chan,
                 .v_dtype = KvDtype::kInt2Had,
                 .max_num_seqs = 8};
  c.layer_formats.k = {{18, KvDtype::kInt4Chan}, {20, KvDtype::kInt4Chan}};
  c.layer_formats.v = {{1, KvDtype::kInt4Had}};
  return c;
}

// The mean negative log-likelihood of long_chat_prompt's tokens from position 48 on.
double score(LoadedModel& m, EngineConfig c) {
  auto e = make_engine(m, c);
  auto id =
      e->add_request({.prompt = test::long_chat_prompt(m), .max_tokens = 0, .score_from = 48});
  EXPECT_TRUE(id.is_ok()) << id.status().to_string();
  while (e->has_unfinished()) (void)e->step();
  const Sequence& s = e->sequence(*id);
  EXPECT_GT(s.prompt_scored, 0u);
  return s.prompt_nll / s.prompt_scored;
}

std::map<uint32_t, KvDtype> every_layer(uint32_t layers, KvDtype d) {
  std::map<uint32_t, KvDtype> m;
  for (uint32_t l = 0; l < layers; ++l) m[l] = d;
  return m;
}

TEST(KvLayerFormatsEngineTest, ListingEveryLayerIsThePoolInThatFormat) {
  REQUIRE_MODEL();
  const uint32_t layers = model->spec.n_layers;
  struct Case {
    KvDtype pool_k, pool_v, k, v;
  };
  for (const Case& t :
       {Case{KvDtype::kF16, KvDtype::kF16, KvDtype::kInt8, KvDtype::kInt4Had},
        Case{KvDtype::kInt2Chan, KvDtype::kInt2Had, KvDtype::kInt4Chan, KvDtype::kInt3Had}}) {
    SCOPED_TRACE(std::string(kv_dtype_name(t.k)) + "/" + kv_dtype_name(t.v));
    EngineConfig uniform{.kv_cache_memory = 64ull << 20, .k_dtype = t.k, .v_dtype = t.v};
    EngineConfig listed{.kv_cache_memory = 64ull << 20, .k_dtype = t.pool_k, .v_dtype = t.pool_v};
    listed.layer_formats = {.k = every_layer(layers, t.k), .v = every_layer(layers, t.v)};
    auto a = make_engine(*model, uniform);
    auto b = make_engine(*model, listed);
    EXPECT_EQ(a->kv_pool().block_bytes, b->kv_pool().block_bytes);
    EXPECT_EQ(a->kv_pool().num_blocks, b->kv_pool().num_blocks);
    const auto p = test::long_chat_prompt(*model);
    EXPECT_EQ(run_all(*a, {p}, 12), run_all(*b, {p}, 12));
    // The same bytes in the same kernels: the same scores to the last bit.
    EXPECT_EQ(score(*model, uniform), score(*model, listed));
  }
}

TEST(KvLayerFormatsEngineTest, AMixedPoolKeepsItsOutputUnderChunksHitsPreemptionAndForks) {
  REQUIRE_MODEL();
  EngineConfig c = mixed_config();
  c.recent_window = 32;
  c.attention_sink = true;
  test::expect_chunks_and_hits_keep_output(*model, c,
                                           [&](EngineConfig x) { return make_engine(*model, x); });

  // Six prompts at once in a pool of 5 blocks: preempted, recomputed, sharing cached blocks.
  std::vector<std::vector<int32_t>> prompts;
  for (const char* t : {"The capital of France is", "def fibonacci(n):\n    ",
                        "Once upon a time, in a small village by the sea, there lived"})
    for (int r = 0; r < 2; ++r) prompts.push_back(test::tokens_of(*model, t));
  EngineConfig plain = mixed_config();
  plain.enable_prefix_caching = false;
  std::vector<std::vector<int32_t>> expect;
  {
    auto e = make_engine(*model, plain);
    for (const auto& p : prompts) expect.push_back(run_all(*e, {p}, 16)[0]);
  }
  EngineConfig tight = mixed_config();
  const auto plan =
      plan_kv_pool(model->spec.kv_model_shape(tight.k_dtype, tight.v_dtype, tight.layer_formats),
                   64ull << 20, 16, tight.max_num_seqs);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  tight.kv_cache_memory = 5 * plan->block_bytes + plan->key_tail_bytes;
  auto e = make_engine(*model, tight);
  ASSERT_EQ(e->kv_pool().num_blocks, 5u);
  EXPECT_EQ(run_all(*e, prompts, 16), expect);
  EXPECT_GT(e->num_preemptions(), 0u);

  // Forked samples share the prompt's partly filled last block copy-on-write.
  const auto prompt = test::tokens_of(*model, "Once upon a time, in a small village");
  ASSERT_NE(prompt.size() % 16, 0u);
  auto one = make_engine(*model, mixed_config());
  const auto single = run_all(*one, {prompt}, 12)[0];
  auto forks = make_engine(*model, mixed_config());
  const auto samples = test::forked_samples(*forks, prompt, 12, 3);
  ASSERT_EQ(samples.size(), 3u);
  for (const auto& [index, tokens] : samples) EXPECT_EQ(tokens, single) << "sample " << index;
}

TEST(KvLayerFormatsEngineTest, TheListedLayersTakeLossAwayAtTheirBytes) {
  REQUIRE_MODEL();
  EngineConfig exact{.kv_cache_memory = 64ull << 20, .max_num_seqs = 8};
  EngineConfig uniform = mixed_config();
  uniform.layer_formats = {};
  const double f16 = score(*model, exact), two = score(*model, uniform),
               mixed = score(*model, mixed_config());
  // Measured: 0.630, 0.713 and 0.661 nats per token: the three layer parts take 63% of the loss.
  EXPECT_LT(std::abs(mixed - f16), 0.5 * std::abs(two - f16)) << f16 << " " << two << " " << mixed;
  // The bytes: 28 layers of int2_chan keys, 2 of int4_chan (32, 48 B per head at head dim 64);
  // 29 layers of int2_had values, 1 of int4_had (20 + 36 B); 3 KV heads.
  auto e = make_engine(*model, mixed_config());
  EXPECT_EQ(e->kv_pool().bytes_per_token, 3u * (28 * 32 + 2 * 48 + 29 * 20 + 36));
  EXPECT_EQ(e->kv_pool().block_bytes, 16u * e->kv_pool().bytes_per_token);
}

TEST(KvLayerFormatsEngineTest, TheDiskTierKeepsMixedAndUniformBlocksApart) {
  REQUIRE_MODEL();
  char tmpl[] = "/tmp/kvs-layer-formats-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  const auto p = test::long_chat_prompt(*model);
  auto with_disk = [&](EngineConfig c) {
    c.offload.disk_dir = dir;
    c.offload.disk_admit_hits = 0;
    return c;
  };
  std::vector<int32_t> first_output;
  {
    auto cold = make_engine(*model, with_disk(mixed_config()));
    first_output = run_all(*cold, {p}, 8)[0];
  }  // shut down: the pool's blocks are on disk
  EngineConfig uniform = mixed_config();
  uniform.layer_formats = {};
  {
    auto other = make_engine(*model, with_disk(uniform));
    std::vector<uint32_t> cached;
    (void)run_all(*other, {p}, 8, &cached);
    EXPECT_EQ(cached[0], 0u);  // another pool's blocks are never its hits
    EXPECT_GE(other->snapshot().offload.disk_foreign_extents, 1u);
  }
  EngineConfig other_layers = mixed_config();
  other_layers.layer_formats.k = {{18, KvDtype::kInt4Chan}};
  {
    auto other = make_engine(*model, with_disk(other_layers));
    std::vector<uint32_t> cached;
    (void)run_all(*other, {p}, 8, &cached);
    EXPECT_EQ(cached[0], 0u);
  }
  {
    auto warm = make_engine(*model, with_disk(mixed_config()));
    std::vector<uint32_t> cached;
    EXPECT_EQ(run_all(*warm, {p}, 8, &cached)[0], first_output);
    EXPECT_EQ(cached[0], (p.size() - 1) / 16 * 16);
  }
  // Demoted to one format for every layer in the host tier, and loaded back into each layer's
  // own: a pool of 12 blocks that another prompt's blocks evict `p`'s from.
  const auto plan = plan_kv_pool(model->spec.kv_model_shape(KvDtype::kInt2Chan, KvDtype::kInt2Had,
                                                            mixed_config().layer_formats),
                                 64ull << 20, 16, mixed_config().max_num_seqs);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  EngineConfig demoted = mixed_config();
  demoted.kv_cache_memory = 12 * plan->block_bytes + plan->key_tail_bytes;
  demoted.offload.host_bytes = 16 * plan->block_bytes;
  // int8 would take more bytes than the pool's 2-bit layers: refused.
  demoted.offload.tier_dtype = KvDtype::kInt8;
  demoted.model_fingerprint = model->fingerprint;
  auto larger = Engine::create(*model->model, demoted);
  ASSERT_FALSE(larger.is_ok());
  EXPECT_NE(larger.status().message().find("more than the pool's"), std::string::npos)
      << larger.status().to_string();
  demoted.offload.tier_dtype = KvDtype::kInt2Had;  // 40 B per token and head, the pool's 53.6
  auto e = make_engine(*model, demoted);
  ASSERT_EQ(e->kv_pool().num_blocks, 12u);
  ASSERT_TRUE(e->snapshot().offload.tier_dtype.has_value());
  std::string other_text = "A different document about rivers.";
  for (int i = 0; i < 20; ++i)
    other_text += " Rivers carry water number " + std::to_string(i) + ".";
  const auto other_prompt = test::tokens_of(*model, other_text);
  ASSERT_GT(other_prompt.size(), 110u);
  std::vector<uint32_t> cached;
  (void)run_all(*e, {p}, 8, &cached);
  (void)run_all(*e, {other_prompt}, 8, &cached);
  EXPECT_EQ(run_all(*e, {p}, 8, &cached)[0].size(), 8u);
  EXPECT_GT(cached[2], 0u);
  EXPECT_GT(e->snapshot().offload.host.hit_tokens, 0u);
  std::filesystem::remove_all(dir);
}

// The prefix cache's and the tiers' fingerprint: another list, another role or none differ.
TEST(KvLayerFormatsEngineTest, TheFormatsArePartOfTheFingerprint) {
  const uint64_t base = 1234;
  const std::vector<KvLayerFormats> lists = {
      {.k = {{18, KvDtype::kInt4Chan}}},
      {.v = {{18, KvDtype::kInt4Chan}}},
      {.k = {{18, KvDtype::kInt3Chan}}},
      {.k = {{19, KvDtype::kInt4Chan}}},
      {.k = {{18, KvDtype::kInt4Chan}, {20, KvDtype::kInt4Chan}}},
      {.k = {{18, KvDtype::kInt4Chan}}, .v = {{1, KvDtype::kInt4Had}}}};
  std::vector<uint64_t> keys = {base};
  for (const KvLayerFormats& f : lists) keys.push_back(kv_layer_formats_fingerprint(base, f));
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(std::unique(keys.begin(), keys.end()), keys.end());
  EXPECT_NE(kv_layer_formats_fingerprint(base, lists[0]),
            kv_layer_formats_fingerprint(base + 1, lists[0]));
}

TEST(KvLayerFormatsEngineTest, BadListsAreClearErrors) {
  REQUIRE_MODEL();
  auto error_of = [&](EngineConfig c) {
    c.model_fingerprint = model->fingerprint;
    auto e = Engine::create(*model->model, c);
    return e.is_ok() ? std::string() : e.status().message();
  };
  EngineConfig c = mixed_config();
  c.layer_formats.k[30] = KvDtype::kInt4Chan;
  EXPECT_NE(error_of(c).find("--kv-cache-dtype-k-layers: layer 30: the model has 30 layers"),
            std::string::npos)
      << error_of(c);
  c = mixed_config();
  c.layer_formats.k[3] = KvDtype::kInt4Had;  // per token, the pool's keys per channel
  EXPECT_NE(error_of(c).find("grouped like the pool's"), std::string::npos) << error_of(c);
  c = mixed_config();
  c.layer_formats.k[3] = KvDtype::kInt4Chan64;  // per channel over 64 tokens, the pool's 16
  EXPECT_NE(error_of(c).find("over 64 tokens"), std::string::npos) << error_of(c);
  c = mixed_config();
  c.layer_formats.v[2] = KvDtype::kInt4Chan;
  EXPECT_NE(error_of(c).find("K format only"), std::string::npos) << error_of(c);
}

}  // namespace
}  // namespace kvs
