// Attention scores of int8 keys (kernels/int8_key_dots.h): the query quantizer's contract, the
// VNNI kernels' sums against plain integer loops (exact, including the extremes where the +128
// key offset and the sums are largest), and paged attention over int8 K giving the same bits
// whichever ISA scores the keys. ISAs the CPU lacks are reported as skipped.
#include "kernels/int8_key_dots.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/int8_isa.h"
#include "kernels/kv_write.h"
#include "kernels/paged_attention.h"
#include "kvcache/kv_block_storage.h"
#include "quant/kv_format.h"

namespace kvs {
namespace {

TEST(QuantizeQueryInt8Test, ScaleRoundingAndSum) {
  const float x[8] = {-2.54f, 1.0f, 0.01f, 2.0f, -0.0f, 0.5f, -1.27f, 0.03f};
  int8_t q[8];
  int32_t sum = 0;
  const float d = quantize_query_int8(x, 8, q, &sum);
  EXPECT_FLOAT_EQ(d, 2.54f / 127.0f);
  EXPECT_EQ(q[0], -127);  // the largest magnitude maps to the end of the range
  int32_t expect_sum = 0;
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(q[i], static_cast<int8_t>(std::nearbyint(x[i] / d))) << i;
    EXPECT_LE(std::fabs(q[i] * d - x[i]), d / 2 * (1 + 1e-5f)) << i;
    expect_sum += q[i];
  }
  EXPECT_EQ(sum, expect_sum);
}

TEST(QuantizeQueryInt8Test, ZeroAndNonFiniteQueriesScoreZero) {
  std::vector<float> x(64, 0.0f);
  std::vector<int8_t> q(64, 5);
  int32_t sum = 7;
  EXPECT_EQ(quantize_query_int8(x.data(), 64, q.data(), &sum), 0.0f);
  EXPECT_EQ(sum, 0);
  for (int8_t v : q) EXPECT_EQ(v, 0);
  x[3] = INFINITY;
  EXPECT_EQ(quantize_query_int8(x.data(), 64, q.data(), &sum), 0.0f);
  for (int8_t v : q) EXPECT_EQ(v, 0);
}

// The VNNI kernel of `isa`, or skip.
const int8_key_dots::Kernels* kernels_or_skip(Int8Isa isa) {
  if (!int8_isa_supported(isa)) return nullptr;
  return isa == Int8Isa::kAvx512Vnni ? &int8_key_dots::kernels_avx512vnni()
                                     : &int8_key_dots::kernels_avxvnni();
}

class Int8KeyDotsTest : public ::testing::TestWithParam<Int8Isa> {};

TEST_P(Int8KeyDotsTest, SumsAreExact) {
  const auto* kd = kernels_or_skip(GetParam());
  if (kd == nullptr) GTEST_SKIP() << int8_isa_name(GetParam()) << " not supported by this CPU";
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> byte(-127, 127);
  for (uint32_t D : {32u, 64u, 128u, 192u}) {
    if (D % kd->chunk != 0) continue;
    const uint64_t key_bytes = D + 2;  // the int8 format's vector: D bytes and an f16 scale
    for (int ng = 1; ng <= 4; ++ng) {
      for (int32_t n : {1, 2, 3, 4, 5, 16, 37}) {
        for (int extreme = 0; extreme < 3; ++extreme) {
          std::vector<int8_t> q(size_t(ng) * D);
          std::vector<uint8_t> keys(n * key_bytes);
          for (auto& v : q) v = static_cast<int8_t>(extreme == 0 ? byte(rng) : 127);
          for (auto& v : keys)
            v = static_cast<uint8_t>(extreme == 0 ? byte(rng) : (extreme == 1 ? 127 : -127));
          std::vector<int32_t> qsum(ng);
          for (int g = 0; g < ng; ++g)
            qsum[g] = std::accumulate(q.begin() + g * D, q.begin() + (g + 1) * D, 0);
          const int64_t stride = n + 3;
          std::vector<float> out(size_t(ng) * stride, -1.0f);
          kd->dots(q.data(), qsum.data(), ng, D, keys.data(), key_bytes, n, out.data(), stride,
                   int8_key_dots::Prefetch{.p = {keys.data(), nullptr}, .bytes = {64, 0}});
          for (int g = 0; g < ng; ++g) {
            for (int32_t j = 0; j < n; ++j) {
              int32_t s = 0;
              for (uint32_t i = 0; i < D; ++i)
                s += int32_t{q[g * D + i]} * static_cast<int8_t>(keys[j * key_bytes + i]);
              ASSERT_EQ(out[g * stride + j], static_cast<float>(s))
                  << "D " << D << " ng " << ng << " n " << n << " key " << j;
            }
            for (int64_t j = n; j < stride; ++j) ASSERT_EQ(out[g * stride + j], -1.0f);
          }
        }
      }
    }
  }
}

// 4-bit per-channel rows (q4_0's nibble order: byte b of a 32-code block holds code b in its low
// nibble, b + 16 in its high one): sum q (code - 8), exact, at the extremes too.
TEST_P(Int8KeyDotsTest, Q4RowSumsAreExact) {
  const auto* kd = kernels_or_skip(GetParam());
  if (kd == nullptr) GTEST_SKIP() << int8_isa_name(GetParam()) << " not supported by this CPU";
  std::mt19937 rng(8);
  std::uniform_int_distribution<int> qbyte(-127, 127), nibble(0, 15);
  for (uint32_t D : {32u, 64u, 128u, 256u}) {
    if (D % kd->chunk != 0) continue;
    for (int ng = 1; ng <= 4; ++ng) {
      for (int32_t n : {1, 3, 4, 5, 16, 37, 64}) {
        for (int extreme = 0; extreme < 3; ++extreme) {
          std::vector<int8_t> q(size_t(ng) * D);
          std::vector<uint8_t> rows(size_t(n) * D / 2);
          for (auto& v : q) v = static_cast<int8_t>(extreme == 0 ? qbyte(rng) : -127);
          for (auto& v : rows)
            v = static_cast<uint8_t>(extreme == 0   ? nibble(rng) | nibble(rng) << 4
                                     : extreme == 1 ? 0xFF
                                                    : 0x00);
          std::vector<int32_t> qsum(ng);
          for (int g = 0; g < ng; ++g)
            qsum[g] = std::accumulate(q.begin() + g * D, q.begin() + (g + 1) * D, 0);
          const int64_t stride = n + 2;
          std::vector<float> out(size_t(ng) * stride, -1.0f);
          kd->q4_rows(q.data(), qsum.data(), ng, D, rows.data(), n, out.data(), stride,
                      int8_key_dots::Prefetch{.p = {rows.data(), nullptr}, .bytes = {64, 0}});
          for (int g = 0; g < ng; ++g) {
            for (int32_t j = 0; j < n; ++j) {
              int32_t s = 0;
              for (uint32_t i = 0; i < D; ++i) {
                const uint8_t byte = rows[j * D / 2 + i / 32 * 16 + i % 16];
                const int32_t code = i % 32 < 16 ? byte & 0x0F : byte >> 4;
                s += int32_t{q[g * D + i]} * (code - 8);
              }
              ASSERT_EQ(out[g * stride + j], static_cast<float>(s))
                  << "D " << D << " ng " << ng << " n " << n << " row " << j;
            }
            for (int64_t j = n; j < stride; ++j) ASSERT_EQ(out[g * stride + j], -1.0f);
          }
        }
      }
    }
  }
}

// int2mix_chan64 rows: 2-bit codes LSB first, a third bit per wide channel (D / 4 of them, in
// channel order), sum q (code + 4 x third), exact, at the extremes too.
TEST_P(Int8KeyDotsTest, MixRowSumsAreExact) {
  const auto* kd = kernels_or_skip(GetParam());
  if (kd == nullptr) GTEST_SKIP() << int8_isa_name(GetParam()) << " not supported by this CPU";
  if (kd->mix_rows == nullptr)
    GTEST_SKIP() << "no int2mix kernel for " << int8_isa_name(GetParam());
  std::mt19937 rng(9);
  std::uniform_int_distribution<int> qbyte(-127, 127), byte(0, 255);
  for (uint32_t D : {64u, 128u, 256u}) {
    const uint32_t W = D / 4;
    for (int ng = 1; ng <= 4; ++ng) {
      for (int32_t n : {1, 3, 4, 5, 37, 64}) {
        for (int extreme = 0; extreme < 3; ++extreme) {
          // W wide channels at random places.
          std::vector<uint32_t> order(D);
          std::iota(order.begin(), order.end(), 0u);
          std::shuffle(order.begin(), order.end(), rng);
          std::vector<bool> is_wide(D, false);
          for (uint32_t k = 0; k < W; ++k) is_wide[order[k]] = true;
          std::vector<uint16_t> steps(D);  // f16 steps, the wide channels' with the sign bit
          for (uint32_t i = 0; i < D; ++i)
            steps[i] = static_cast<uint16_t>((is_wide[i] ? 0x8000u : 0u) | 0x3C00u | i);
          std::vector<int8_t> q(size_t(ng) * D);
          std::vector<uint8_t> rows(size_t(n) * D / 4), thirds(size_t(n) * D / 32);
          for (auto& v : q) v = static_cast<int8_t>(extreme == 0 ? qbyte(rng) : 127);
          for (auto* a : {&rows, &thirds})
            for (auto& v : *a)
              v = static_cast<uint8_t>(extreme == 0 ? byte(rng) : extreme == 1 ? 0xFF : 0);
          const int64_t stride = n + 2;
          std::vector<float> out(size_t(ng) * stride, -1.0f);
          kd->mix_rows(q.data(), ng, D, reinterpret_cast<const uint8_t*>(steps.data()), rows.data(),
                       thirds.data(), n, out.data(), stride,
                       int8_key_dots::Prefetch{.p = {rows.data(), nullptr}, .bytes = {64, 0}});
          for (int g = 0; g < ng; ++g) {
            for (int32_t j = 0; j < n; ++j) {
              int32_t s = 0;
              uint32_t k = 0;
              for (uint32_t i = 0; i < D; ++i) {
                int32_t code = (rows[j * D / 4 + i / 4] >> (2 * (i % 4))) & 3;
                if (is_wide[i]) {
                  code += 4 * ((thirds[j * D / 32 + k / 8] >> (k % 8)) & 1);
                  ++k;
                }
                s += int32_t{q[g * D + i]} * code;
              }
              ASSERT_EQ(out[g * stride + j], static_cast<float>(s))
                  << "D " << D << " ng " << ng << " n " << n << " row " << j;
            }
            for (int64_t j = n; j < stride; ++j) ASSERT_EQ(out[g * stride + j], -1.0f);
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, Int8KeyDotsTest,
                         ::testing::Values(Int8Isa::kAvxVnni, Int8Isa::kAvx512Vnni),
                         [](const ::testing::TestParamInfo<Int8Isa>& info) {
                           std::string s = int8_isa_name(info.param);
                           for (auto& c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

// Paged attention over int8 K (and int8_had K, against the rotated query; and 4-bit and int2mix
// per-channel K, against each group's int8 q x step): the VNNI scores and the Highway scores are
// the same integers with the same factors, so on one Highway target every ISA gives the same output
// bits (long contexts split into segments, head groups above one register batch, a short tail
// block).
class Int8KeyAttentionTest : public ::testing::TestWithParam<KvDtype> {};

TEST_P(Int8KeyAttentionTest, EveryIsaGivesTheSameBits) {
  const KvDtype k_dtype = GetParam();
  for (uint32_t D : {64u, 128u}) {
    const uint32_t H = 10, KVH = 2, bs = std::max(16u, kv_channel_group_tokens(k_dtype));
    const int n = 700;
    const uint32_t nblocks = (n + bs - 1) / bs;
    auto storage = KvBlockStorage::create({.num_blocks = nblocks,
                                           .block_size = bs,
                                           .layers = 1,
                                           .kv_heads = KVH,
                                           .head_dim = D,
                                           .k_dtype = k_dtype,
                                           .v_dtype = KvDtype::kF16});
    ASSERT_TRUE(storage.is_ok());
    std::mt19937 rng(11);
    std::normal_distribution<float> nd(0.0f, 1.5f);
    std::vector<uint32_t> table(nblocks);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    std::vector<float> k(size_t(n) * KVH * D), v(k.size());
    for (auto& x : k) x = nd(rng);
    for (auto& x : v) x = nd(rng);
    std::vector<int64_t> slots(n);
    for (int j = 0; j < n; ++j) slots[j] = int64_t{table[j / bs]} * bs + j % bs;
    write_kv(storage->layout(), 0, n, slots.data(), k.data(), v.data());
    const int T = 3;
    std::vector<int32_t> ctx = {n, n - 300, 5};
    std::vector<const uint32_t*> tab(T, table.data());
    std::vector<float> q(size_t(T) * H * D), out(q.size()), first(q.size());
    for (auto& x : q) x = nd(rng);
    ThreadPool pool(3);
    PagedAttentionArgs args{.kv = storage->layout(),
                            .layer = 0,
                            .num_tokens = T,
                            .num_heads = H,
                            .scale = 1.0f / std::sqrt(float(D)),
                            .q = q.data(),
                            .out = first.data(),
                            .context_len = ctx.data(),
                            .block_table = tab.data()};
    set_int8_isa_for_test(Int8Isa::kNone);
    paged_attention(args, pool);
    args.out = out.data();
    for (Int8Isa isa : kAllInt8Isas) {
      if (!int8_isa_supported(isa)) continue;
      set_int8_isa_for_test(isa);
      std::fill(out.begin(), out.end(), 0.0f);
      paged_attention(args, pool);
      for (size_t i = 0; i < out.size(); ++i)
        ASSERT_EQ(out[i], first[i]) << int8_isa_name(isa) << " D " << D << " at " << i;
    }
    set_int8_isa_for_test(std::nullopt);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, Int8KeyAttentionTest,
                         ::testing::Values(KvDtype::kInt8, KvDtype::kInt8Had, KvDtype::kInt4Chan,
                                           KvDtype::kInt4Chan64, KvDtype::kInt2MixChan64),
                         [](const ::testing::TestParamInfo<KvDtype>& info) {
                           return std::string(kv_dtype_name(info.param));
                         });

}  // namespace
}  // namespace kvs
