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
