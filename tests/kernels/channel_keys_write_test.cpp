// Per-channel keys written through write_kv (kernels/kv_write.h): a group filled one token at a
// time, or in any chunks, ends with exactly the bytes of one written at once (the tails keep the
// earlier rows' keys); without a tail (evicted, or the block overwritten by a copy) the earlier
// rows come back from the group's bytes, within the format's error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/kv_vector.h"
#include "kernels/kv_write.h"
#include "kvcache/kv_block_storage.h"
#include "quant/kv_channel_groups.h"

namespace kvs {
namespace {

constexpr uint32_t kLayers = 2, kHeads = 2, kDim = 64, kBlock = 32, kBlocks = 4;

// Blocks of kBlock tokens, or of one group for the 64-token formats.
uint32_t block_of(KvDtype k) { return std::max(kBlock, kv_channel_group_tokens(k)); }

KvBlockStorage make_storage(KvDtype k, uint32_t tail_slots) {
  return std::move(KvBlockStorage::create({.num_blocks = kBlocks,
                                           .block_size = block_of(k),
                                           .layers = kLayers,
                                           .kv_heads = kHeads,
                                           .head_dim = kDim,
                                           .k_dtype = k,
                                           .v_dtype = KvDtype::kF16,
                                           .key_tail_slots = tail_slots}))
      .value();
}

// Writes tokens [0, n) of one sequence in blocks 2, 0 (a scattered table), in chunks of the
// given sizes, every layer.
void write_sequence(KvBlockStorage& st, const std::vector<float>& k, const std::vector<float>& v,
                    uint32_t n, const std::vector<uint32_t>& chunks) {
  const uint32_t table[] = {2, 0};
  const uint32_t block = st.shape().block_size;
  uint32_t t = 0;
  for (size_t i = 0; t < n; ++i) {
    const uint32_t len = std::min(n - t, chunks[i % chunks.size()]);
    std::vector<int64_t> slots(len);
    for (uint32_t j = 0; j < len; ++j)
      slots[j] = int64_t{table[(t + j) / block]} * block + (t + j) % block;
    for (uint32_t layer = 0; layer < kLayers; ++layer)
      write_kv(st.layout(), layer, len, slots.data(), k.data() + uint64_t{t} * kHeads * kDim,
               v.data() + uint64_t{t} * kHeads * kDim);
    t += len;
  }
}

std::vector<float> random_keys(uint32_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(uint64_t{n} * kHeads * kDim);
  for (size_t i = 0; i < x.size(); ++i) x[i] = nd(rng) + (i % kDim == 3 ? 15.0f : 0.0f);
  return x;
}

TEST(ChannelKeysWriteTest, AnyChunkingEndsWithTheBytesOfOneWrite) {
  std::mt19937 rng(5);
  for (KvDtype d :
       {KvDtype::kInt4Chan, KvDtype::kInt3Chan, KvDtype::kInt2Chan, KvDtype::kInt4Chan64,
        KvDtype::kInt3Chan64, KvDtype::kInt2Chan64, KvDtype::kInt2MixChan64})
    for (uint32_t n : {1u, 15u, 16u, 17u, 40u, 64u, 65u, 100u}) {
      if (n > 2 * block_of(d)) continue;
      const uint32_t group = kv_channel_group_tokens(d);
      const std::vector<float> k = random_keys(n, rng), v = random_keys(n, rng);
      KvBlockStorage once = make_storage(d, 4);
      write_sequence(once, k, v, n, {n});
      for (const std::vector<uint32_t>& chunks :
           std::vector<std::vector<uint32_t>>{{1}, {3}, {5, 1, 11}, {16}, {17, 2}, {63, 1, 64}}) {
        KvBlockStorage steps = make_storage(d, 4);
        write_sequence(steps, k, v, n, chunks);
        for (uint32_t b : {2u, 0u})
          ASSERT_EQ(std::memcmp(once.block_data(b), steps.block_data(b), once.block_bytes()), 0)
              << kv_dtype_name(d) << " n " << n << " first chunk " << chunks[0] << " block " << b;
        ASSERT_TRUE(steps.key_tails()->check_integrity());
        // Only the last, partly filled group still has a tail (a slot in each layer).
        EXPECT_EQ(steps.key_tails()->in_use(), n % group != 0 ? kLayers : 0u);
      }
    }
}

// A block overwritten by a copy loses its tails; the next token re-seals from the group's bytes.
// Without tails at all, each token re-seals from the bytes. Either way every key stays within
// the format's error of the key written (here 4-bit: about range / 30 per element).
TEST(ChannelKeysWriteTest, WithoutTailsKeysStayWithinTheFormatsError) {
  std::mt19937 rng(9);
  const uint32_t n = 40;
  const std::vector<float> k = random_keys(n, rng), v = random_keys(n, rng);
  for (uint32_t tail_slots : {0u, 4u}) {
    KvBlockStorage st = make_storage(KvDtype::kInt4Chan, tail_slots);
    write_sequence(st, k, v, 20, {1});
    st.copy_tokens(2, 1, kBlock);  // block 1 := block 2; then back, which invalidates 2's tails
    st.copy_tokens(1, 2, kBlock);
    std::vector<float> rest(k.begin() + 20 * kHeads * kDim, k.end());
    const uint32_t table[] = {2, 0};
    for (uint32_t t = 20; t < n; ++t) {
      const int64_t slot = int64_t{table[t / kBlock]} * kBlock + t % kBlock;
      for (uint32_t layer = 0; layer < kLayers; ++layer)
        write_kv(st.layout(), layer, 1, &slot, k.data() + uint64_t{t} * kHeads * kDim,
                 v.data() + uint64_t{t} * kHeads * kDim);
    }
    std::vector<float> y(kDim);
    double worst = 0;
    for (uint32_t t = 0; t < n; ++t)
      for (uint32_t h = 0; h < kHeads; ++h) {
        kv_key_to_f32(st.layout(), table[t / kBlock], 1, h, t % kBlock, y.data());
        for (uint32_t i = 0; i < kDim; ++i)
          worst =
              std::max(worst, double(std::abs(y[i] - k[(uint64_t{t} * kHeads + h) * kDim + i])));
      }
    // N(0, 1) keys over 16 tokens span about 5: a 4-bit step of 1/3, half of it 0.17, and one
    // more rounding for the rows decoded back.
    EXPECT_LT(worst, 0.45) << "tail slots " << tail_slots;
  }
}

}  // namespace
}  // namespace kvs
