// write_kv on a pool's threads (kernels/kv_write.h): the same pool bytes as on one thread, for
// per-vector formats (searched, rotated, plain) and per-channel keys, from one token (a decode
// step) to a prefill chunk, into scattered slots.
#include "kernels/kv_write.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/kv_vector.h"
#include "kvcache/kv_block_storage.h"
#include "quant/kv_channel_groups.h"

namespace kvs {
namespace {

constexpr uint32_t kLayers = 2, kHeads = 3, kDim = 64, kBlock = 64, kBlocks = 3;

KvBlockStorage make_storage(KvDtype k, KvDtype v) {
  return std::move(KvBlockStorage::create({.num_blocks = kBlocks,
                                           .block_size = kBlock,
                                           .layers = kLayers,
                                           .kv_heads = kHeads,
                                           .head_dim = kDim,
                                           .k_dtype = k,
                                           .v_dtype = v,
                                           .key_tail_slots = 4}))
      .value();
}

TEST(KvWriteTest, ThePoolsThreadsWriteTheBytesOfOneThread) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const std::pair<KvDtype, KvDtype> formats[] = {
      {KvDtype::kF16, KvDtype::kF16},           {KvDtype::kInt8, KvDtype::kInt8},
      {KvDtype::kInt8Had, KvDtype::kInt8Had},   {KvDtype::kInt4, KvDtype::kQ8_0},
      {KvDtype::kInt4Had, KvDtype::kInt4Had},   {KvDtype::kInt3Had, KvDtype::kInt2Had},
      {KvDtype::kInt4Chan64, KvDtype::kInt2Had}};
  ThreadPool pool(3);
  for (const auto& [k_dtype, v_dtype] : formats)
    for (const uint32_t n : {1u, 2u, 37u, 128u}) {
      // Tokens in a shuffled order of the pool's slots (a scattered block table), one group of
      // per-channel keys per block (the chunk is one sequence's run of slots for those).
      std::vector<int64_t> slots(n);
      std::iota(slots.begin(), slots.end(), int64_t{kBlock} / 2);
      if (!kv_dtype_per_channel(k_dtype)) std::shuffle(slots.begin(), slots.end(), rng);
      std::vector<float> k(uint64_t{n} * kHeads * kDim), v(k.size());
      for (size_t i = 0; i < k.size(); ++i) {
        k[i] = nd(rng) + (i % kDim == 5 ? 12.0f : 0.0f);
        v[i] = nd(rng);
      }
      KvBlockStorage one = make_storage(k_dtype, v_dtype), many = make_storage(k_dtype, v_dtype);
      const uint64_t regions = pool.regions();
      for (uint32_t layer = 0; layer < kLayers; ++layer) {
        write_kv(one.layout(), layer, n, slots.data(), k.data(), v.data());
        write_kv(many.layout(), layer, n, slots.data(), k.data(), v.data(), &pool);
      }
      EXPECT_EQ(pool.regions() - regions, kLayers) << "the vectors went to the pool's threads";
      for (uint32_t b = 0; b < kBlocks; ++b)
        ASSERT_EQ(std::memcmp(one.block_data(b), many.block_data(b), one.block_bytes()), 0)
            << kv_dtype_name(k_dtype) << " / " << kv_dtype_name(v_dtype) << " n " << n << " block "
            << b;
      // Each token's vectors at its own slot: the format's code of its own K and V.
      const PagedKvLayout& kv = many.layout();
      std::vector<uint8_t> want(kv_vector_bytes(KvDtype::kF32, kDim));
      for (uint32_t t = 0; t < n; ++t)
        for (uint32_t h = 0; h < kHeads; ++h) {
          const uint64_t block = slots[t] / kBlock, off = slots[t] % kBlock;
          const uint64_t at = (uint64_t{t} * kHeads + h) * kDim;
          kv_vector_from_f32(v_dtype, v.data() + at, kDim, want.data());
          ASSERT_EQ(std::memcmp(kv.v_head(block, 1, h) + off * kv.v_vector_bytes, want.data(),
                                kv.v_vector_bytes),
                    0)
              << "V of token " << t << " head " << h;
          if (kv_dtype_per_channel(k_dtype)) continue;
          kv_vector_from_f32(k_dtype, k.data() + at, kDim, want.data());
          ASSERT_EQ(std::memcmp(kv.k_head(block, 1, h) + off * kv.k_vector_bytes, want.data(),
                                kv.k_vector_bytes),
                    0)
              << "K of token " << t << " head " << h;
        }
    }
}

}  // namespace
}  // namespace kvs
