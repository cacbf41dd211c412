// Paged attention vs a contiguous (unpaged) attention over the same K/V, with the sequence's
// blocks shuffled across the pool; and the Highway kernel vs the scalar reference.
#include "kernels/paged_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/kv_vector.h"
#include "kernels/kv_write.h"

namespace kvs {
namespace {

struct Case {
  uint32_t block_size;
  KvDtype dtype;
};

class PagedAttentionTest : public ::testing::TestWithParam<Case> {};

// Plain attention over contiguous K/V [n][kv_heads][D] (already rounded to the KV format).
void contiguous_attention(const float* q, const std::vector<float>& k, const std::vector<float>& v,
                          int n, uint32_t H, uint32_t KVH, uint32_t D, float scale, float* out) {
  const uint32_t group = H / KVH;
  for (uint32_t h = 0; h < H; ++h) {
    std::vector<double> s(n);
    double m = -INFINITY;
    for (int j = 0; j < n; ++j) {
      double d = 0;
      for (uint32_t i = 0; i < D; ++i) d += double(q[h * D + i]) * k[(j * KVH + h / group) * D + i];
      s[j] = d * scale;
      m = std::max(m, s[j]);
    }
    double sum = 0;
    for (auto& x : s) sum += (x = std::exp(x - m));
    for (uint32_t i = 0; i < D; ++i) {
      double acc = 0;
      for (int j = 0; j < n; ++j) acc += s[j] / sum * v[(j * KVH + h / group) * D + i];
      out[h * D + i] = static_cast<float>(acc);
    }
  }
}

TEST_P(PagedAttentionTest, MatchesContiguousWithShuffledBlocks) {
  const Case c = GetParam();
  const uint32_t H = 6, KVH = 2, D = 64, layers = 2;
  const int seqs = 3;
  const int lens[seqs] = {1, 37, 300};
  std::mt19937 rng(1234 + c.block_size);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  uint32_t blocks_needed = 0;
  for (int len : lens) blocks_needed += (len + c.block_size - 1) / c.block_size;
  const uint32_t num_blocks = blocks_needed + 7;
  auto storage = KvBlockStorage::create({.num_blocks = num_blocks,
                                         .block_size = c.block_size,
                                         .layers = layers,
                                         .kv_heads = KVH,
                                         .head_dim = D,
                                         .k_dtype = c.dtype,
                                         .v_dtype = c.dtype});
  ASSERT_TRUE(storage.is_ok()) << storage.status().to_string();
  const PagedKvLayout& kv = storage->layout();
  // Physical blocks handed out in a shuffled order: logically adjacent blocks are not adjacent.
  std::vector<uint32_t> physical(num_blocks);
  std::iota(physical.begin(), physical.end(), 0);
  std::shuffle(physical.begin(), physical.end(), rng);
  size_t next = 0;
  std::vector<std::vector<uint32_t>> tables(seqs);
  std::vector<std::vector<float>> ks(seqs), vs(seqs);
  const uint32_t layer = 1;
  for (int s = 0; s < seqs; ++s) {
    for (int b = 0; b < (lens[s] + int(c.block_size) - 1) / int(c.block_size); ++b)
      tables[s].push_back(physical[next++]);
    ks[s].resize(size_t(lens[s]) * KVH * D);
    vs[s].resize(ks[s].size());
    for (auto& x : ks[s]) x = nd(rng);
    for (auto& x : vs[s]) x = nd(rng);
    std::vector<int64_t> slots(lens[s]);
    for (int j = 0; j < lens[s]; ++j)
      slots[j] = int64_t{tables[s][j / c.block_size]} * c.block_size + j % c.block_size;
    write_kv(kv, layer, lens[s], slots.data(), ks[s].data(), vs[s].data());
    // The contiguous oracle sees the values as the format stores them.
    std::vector<uint8_t> buf(kv_vector_bytes(c.dtype, D));
    for (auto* arr : {&ks[s], &vs[s]})
      for (size_t off = 0; off < arr->size(); off += D) {
        kv_vector_from_f32(c.dtype, arr->data() + off, D, buf.data());
        kv_vector_to_f32(c.dtype, buf.data(), D, arr->data() + off, 0);
      }
  }
  // Queries: for each sequence, its last 4 positions (a prefill chunk) — mixed in one batch.
  std::vector<int32_t> ctx;
  std::vector<const uint32_t*> tab;
  std::vector<int> owner;
  for (int s = 0; s < seqs; ++s)
    for (int j = std::max(0, lens[s] - 4); j < lens[s]; ++j) {
      ctx.push_back(j + 1);
      tab.push_back(tables[s].data());
      owner.push_back(s);
    }
  const int64_t T = static_cast<int64_t>(ctx.size());
  std::vector<float> q(T * H * D), out(T * H * D), ref(T * H * D), expect(T * H * D);
  for (auto& x : q) x = nd(rng);
  ThreadPool pool(3);
  PagedAttentionArgs args{.kv = kv,
                          .layer = layer,
                          .num_tokens = T,
                          .num_heads = H,
                          .scale = 0.125f,
                          .q = q.data(),
                          .out = out.data(),
                          .context_len = ctx.data(),
                          .block_table = tab.data()};
  paged_attention(args, pool);
  args.out = ref.data();
  paged_attention_reference(args);
  for (int64_t t = 0; t < T; ++t)
    contiguous_attention(q.data() + t * H * D, ks[owner[t]], vs[owner[t]], ctx[t], H, KVH, D,
                         0.125f, expect.data() + t * H * D);
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_NEAR(ref[i], expect[i], 1e-5) << "reference vs contiguous at " << i;
    ASSERT_NEAR(out[i], expect[i], 2e-5 * (1 + std::abs(expect[i])))
        << "kernel vs contiguous at " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(BlockSizesAndFormats, PagedAttentionTest,
                         ::testing::Values(Case{1, KvDtype::kF32}, Case{16, KvDtype::kF32},
                                           Case{256, KvDtype::kF32}, Case{1, KvDtype::kF16},
                                           Case{16, KvDtype::kF16}, Case{256, KvDtype::kF16},
                                           Case{7, KvDtype::kBF16}, Case{16, KvDtype::kBF16}));

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
