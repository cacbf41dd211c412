// sequence_footprint (kv_pool_plan.h) — what the planner reports for one request — against the
// cache manager itself, driven the way the engine runs a lone request (admit with the first
// chunk, then one chunk per step), and against numbers worked out by hand for Gemma 3 270M.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kvcache/kv_cache_manager.h"
#include "kvcache/kv_pool_plan.h"

namespace kvs {
namespace {

// Gemma 3 270M: 18 layers, every 6th full, the others sliding with a 512-token window; 1 KV head
// of 256 dims.
KvModelShape gemma3_shape(KvDtype dtype) {
  KvModelShape s;
  for (int l = 0; l < 18; ++l)
    s.layers.push_back(l % 6 == 5 ? KvLayer::full(1, 256, 256)
                                  : KvLayer::sliding(1, 256, 256, 512));
  s.k_dtype = s.v_dtype = dtype;
  return s;
}

// Peak blocks in use while the manager runs one prompt of `tokens` tokens in chunks.
uint64_t manager_peak(const KvPoolPlan& plan, uint32_t tokens, uint32_t chunk) {
  KvCacheManager m(
      {.num_blocks = 100000, .block_size = plan.block_size, .group_windows = plan.groups.windows});
  std::vector<int32_t> prompt(tokens);
  for (uint32_t i = 0; i < tokens; ++i) prompt[i] = static_cast<int32_t>(i % 1000 + 1);
  const SeqId id{1};
  std::vector<BlockCopy> copies;
  EXPECT_TRUE(m.admit(id, prompt, "", &copies, chunk).is_ok());
  uint64_t peak = m.counters().blocks_in_use;
  uint32_t done = 0;
  while (true) {
    const uint32_t n = m.num_tokens(id) - done;
    m.commit_tokens(id, std::span(prompt).subspan(done, n));
    done += n;
    if (done == tokens) break;
    EXPECT_TRUE(m.append_slots(id, std::min(chunk, tokens - done), &copies).is_ok());
    peak = std::max<uint64_t>(peak, m.counters().blocks_in_use);
  }
  EXPECT_TRUE(m.check_integrity().is_ok());
  return peak;
}

TEST(SequenceFootprint, EqualsTheCacheManagersPeak) {
  for (uint32_t bs : {16u, 7u, 1u}) {
    auto plan = plan_kv_layout(gemma3_shape(KvDtype::kF16), bs);
    ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
    for (uint32_t chunk : {512u, 100u, 16u}) {
      for (uint32_t tokens : {1u, 15u, 16u, 17u, 511u, 512u, 513u, 1000u, 1024u, 4096u, 5000u}) {
        SCOPED_TRACE("bs " + std::to_string(bs) + " chunk " + std::to_string(chunk) + " tokens " +
                     std::to_string(tokens));
        const KvSequenceFootprint f = sequence_footprint(*plan, tokens, chunk);
        EXPECT_EQ(f.blocks, manager_peak(*plan, tokens, chunk));
        EXPECT_EQ(f.bytes, f.blocks * plan->block_bytes);
      }
    }
  }
}

// Per-layer formats need one block group: Gemma 3's six groups hold blocks of one size each,
// which layers of their own formats would break. A uniform model's block is the formula's.
TEST(SequenceFootprint, PerLayerFormatsNeedOneBlockGroup) {
  KvModelShape g = gemma3_shape(KvDtype::kInt4Had);
  g.layer_formats.k = {{5, KvDtype::kInt8}};
  auto refused = plan_kv_layout(g, 16);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("one block group"), std::string::npos)
      << refused.status().to_string();
  KvModelShape u;
  u.layers.assign(30, KvLayer::full(3, 64, 64));
  u.k_dtype = u.v_dtype = KvDtype::kInt4Had;
  u.layer_formats.v = {{0, KvDtype::kF16}};
  auto plan = plan_kv_pool(u, 64ull << 20, 16, 8);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  EXPECT_EQ(plan->bytes_per_token, 3u * (30 * 36 + 29 * 36 + 128));
  EXPECT_EQ(plan->block_bytes, 16 * plan->bytes_per_token);
  EXPECT_EQ(plan->num_blocks, (64ull << 20) / plan->block_bytes);
  EXPECT_EQ(plan->unit.layer_formats, u.layer_formats);
}

TEST(SequenceFootprint, Gemma3WorkedNumbers) {
  auto plan = plan_kv_layout(gemma3_shape(KvDtype::kF16), 16);
  ASSERT_TRUE(plan.is_ok());
  // A block holds 3 layers x 16 tokens x (1 head x 256 x 2 B x 2 for K and V) = 49,152 B.
  EXPECT_EQ(plan->block_bytes, 49'152u);
  ASSERT_EQ(plan->groups.num_groups(), 6u);
  // 1K: the last chunk [512, 1024) still reaches position 1 (window 512), so the sliding groups
  // hold everything: 64 blocks in each of the 6 groups.
  KvSequenceFootprint f = sequence_footprint(*plan, 1024, 512);
  EXPECT_EQ(f.group_blocks, (std::vector<uint32_t>{64, 64, 64, 64, 64, 64}));
  EXPECT_EQ(f.bytes, 384u * 49'152u);
  EXPECT_EQ(f.all_full_bytes, f.bytes);
  // 32K: the full group holds 32,768 / 16 = 2,048 blocks; the last chunk [32,256, 32,768) needs
  // positions from 31,745 on: blocks 1,984 (floor(31,745 / 16)) to 2,047, 64 per sliding group.
  f = sequence_footprint(*plan, 32768, 512);
  EXPECT_EQ(f.group_blocks, (std::vector<uint32_t>{2048, 64, 64, 64, 64, 64}));
  EXPECT_EQ(f.blocks, 2'368u);
  EXPECT_EQ(f.bytes, 116'391'936u);           // 2,368 x 49,152
  EXPECT_EQ(f.all_full_bytes, 603'979'776u);  // 2,048 x 6 x 49,152: every layer full
  // Decoding alone (chunks of one token) holds window + one block: 33 per sliding group.
  f = sequence_footprint(*plan, 32768, 1);
  EXPECT_EQ(f.group_blocks, (std::vector<uint32_t>{2048, 33, 33, 33, 33, 33}));
}

TEST(SequenceFootprint, UniformModelIsTheFormulaRoundedToBlocks) {
  KvModelShape s = KvModelShape::uniform({.layers = 30,
                                          .kv_heads = 3,
                                          .head_dim_k = 64,
                                          .head_dim_v = 64,
                                          .k_dtype = KvDtype::kF16,
                                          .v_dtype = KvDtype::kF16});
  auto plan = plan_kv_layout(s, 16);
  ASSERT_TRUE(plan.is_ok());
  const KvSequenceFootprint f = sequence_footprint(*plan, 1000, 512);
  EXPECT_EQ(f.blocks, 63u);  // ceil(1000 / 16)
  EXPECT_EQ(f.bytes, 63u * 16 * 23'040);
  EXPECT_EQ(f.bytes, f.all_full_bytes);
}

}  // namespace
}  // namespace kvs
