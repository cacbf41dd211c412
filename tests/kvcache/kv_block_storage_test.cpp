// KvBlockStorage: block bytes follow the formula, copy-on-write copies only a block's prefix,
// bad shapes are refused.
#include "kvcache/kv_block_storage.h"

#include <gtest/gtest.h>

namespace kvs {
namespace {

TEST(KvBlockStorageTest, BlockBytesFollowTheFormula) {
  auto st = KvBlockStorage::create({.num_blocks = 4,
                                    .block_size = 16,
                                    .layers = 30,
                                    .kv_heads = 3,
                                    .head_dim = 64,
                                    .k_dtype = KvDtype::kF16,
                                    .v_dtype = KvDtype::kF16});
  ASSERT_TRUE(st.is_ok());
  // 30 layers x 2 x 3 kv heads x 64 x 2 bytes = 23,040 B per token; x 16 tokens per block.
  EXPECT_EQ(st->block_bytes(), 23040u * 16);
  EXPECT_EQ(st->total_bytes(), 23040u * 16 * 4);
}

TEST(KvBlockStorageTest, CopyTokensCopiesOnlyThePrefixOfEveryHead) {
  auto st = KvBlockStorage::create({.num_blocks = 2,
                                    .block_size = 4,
                                    .layers = 2,
                                    .kv_heads = 2,
                                    .head_dim = 8,
                                    .k_dtype = KvDtype::kF32,
                                    .v_dtype = KvDtype::kF32});
  ASSERT_TRUE(st.is_ok());
  const PagedKvLayout& l = st->layout();
  for (uint64_t i = 0; i < st->block_bytes() / 4; ++i)
    reinterpret_cast<float*>(l.base)[i] = float(i + 1);
  st->copy_tokens(0, 1, 3);
  for (uint32_t layer = 0; layer < 2; ++layer)
    for (uint32_t h = 0; h < 2; ++h)
      for (uint32_t slot = 0; slot < 4; ++slot)
        for (uint32_t i = 0; i < 8; ++i) {
          const float* src = reinterpret_cast<const float*>(l.k_head(0, layer, h)) + slot * 8 + i;
          const float* dst = reinterpret_cast<const float*>(l.k_head(1, layer, h)) + slot * 8 + i;
          if (slot < 3)
            EXPECT_EQ(*dst, *src);
          else
            EXPECT_EQ(*dst, 0.0f);
        }
}

// Per-layer formats: each layer's slice in its own formats, layer after layer, adding up to the
// formula's block; copy-on-write copies each layer's prefix in its own vector size.
TEST(KvBlockStorageTest, PerLayerFormatsGiveEachLayerItsSlice) {
  KvStorageShape s{.num_blocks = 2,
                   .block_size = 4,
                   .layers = 3,
                   .kv_heads = 2,
                   .head_dim = 8,
                   .k_dtype = KvDtype::kF16,
                   .v_dtype = KvDtype::kF16};
  s.layer_formats = {.k = {{1, KvDtype::kF32}}, .v = {{2, KvDtype::kF32}}};
  auto st = KvBlockStorage::create(s);
  ASSERT_TRUE(st.is_ok()) << st.status().to_string();
  // Per token: layer 0 2 x 2 x 8 x 2 = 64 B, layer 1 2 x 8 x (4 + 2) = 96 B, layer 2 96 B.
  EXPECT_EQ(st->block_bytes(), 4u * (64 + 96 + 96));
  const PagedKvLayout& l = st->layout();
  ASSERT_TRUE(l.layers != nullptr);
  EXPECT_EQ(l.layer_view(0).layer_offset(0), 0u);
  EXPECT_EQ(l.layer_view(1).layer_offset(1), 4u * 64);
  EXPECT_EQ(l.layer_view(2).layer_offset(2), 4u * (64 + 96));
  const PagedKvLayout v1 = l.layer_view(1), v2 = l.layer_view(2);
  EXPECT_EQ(v1.k_dtype, KvDtype::kF32);
  EXPECT_EQ(v1.v_dtype, KvDtype::kF16);
  EXPECT_EQ(v1.k_vector_bytes, 32u);
  EXPECT_EQ(v1.v_head(0, 1, 0) - v1.k_head(0, 1, 0), 2 * 4 * 32);  // after both K heads
  EXPECT_EQ(v2.v_dtype, KvDtype::kF32);
  EXPECT_EQ(v2.v_head(0, 2, 1) + 4 * 32, l.base + st->block_bytes());  // the block's last row
  // Every byte of block 0 numbered; block 1 gets the first 3 tokens of every layer and head.
  for (uint64_t i = 0; i < st->block_bytes(); ++i) l.base[i] = static_cast<uint8_t>(i * 7 + 1);
  st->copy_tokens(0, 1, 3);
  for (uint32_t layer = 0; layer < 3; ++layer) {
    const PagedKvLayout v = l.layer_view(layer);
    for (uint32_t h = 0; h < 2; ++h) {
      for (uint64_t b = 0; b < 4 * v.k_vector_bytes; ++b)
        EXPECT_EQ(v.k_head(1, layer, h)[b], b < 3 * v.k_vector_bytes ? v.k_head(0, layer, h)[b] : 0)
            << layer << " " << h << " " << b;
      for (uint64_t b = 0; b < 4 * v.v_vector_bytes; ++b)
        EXPECT_EQ(v.v_head(1, layer, h)[b], b < 3 * v.v_vector_bytes ? v.v_head(0, layer, h)[b] : 0)
            << layer << " " << h << " " << b;
    }
  }
  // A layer the model lacks, or keys grouped unlike the pool's, are refused.
  s.layer_formats = {.k = {{3, KvDtype::kF32}}};
  EXPECT_FALSE(KvBlockStorage::create(s).is_ok());
  s.layer_formats = {.k = {{0, KvDtype::kInt4Chan}}};
  EXPECT_FALSE(KvBlockStorage::create(s).is_ok());
}

TEST(KvBlockStorageTest, RejectsBadShapes) {
  EXPECT_FALSE(KvBlockStorage::create(
                   {.num_blocks = 0, .block_size = 16, .layers = 1, .kv_heads = 1, .head_dim = 64})
                   .is_ok());
  EXPECT_FALSE(KvBlockStorage::create(
                   {.num_blocks = 1, .block_size = 257, .layers = 1, .kv_heads = 1, .head_dim = 64})
                   .is_ok());
  EXPECT_FALSE(KvBlockStorage::create({.num_blocks = 1,
                                       .block_size = 16,
                                       .layers = 1,
                                       .kv_heads = 1,
                                       .head_dim = 48,
                                       .k_dtype = KvDtype::kQ4_0,
                                       .v_dtype = KvDtype::kF16})
                   .is_ok());
}

}  // namespace
}  // namespace kvs
