// channel_range (quant/channel_range.h), whole and continued (channel_range_extend), against the
// scalar std::min / std::max loop, bit for bit, on every SIMD target this CPU runs: signed zeros
// of both orders, ties, subnormals, infinities and NaNs among the rows, every row count a group
// has and head dims around the vector widths.
#include "quant/channel_range.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "support/simd_targets.h"

namespace kvs {
namespace {

// lo and hi are want_lo and want_hi bit for bit over dim channels, and the guard after them
// (7.0f) is untouched.
void expect_range(const std::vector<float>& lo, const std::vector<float>& hi,
                  const std::vector<float>& want_lo, const std::vector<float>& want_hi,
                  uint32_t dim, const std::string& what) {
  ASSERT_EQ(std::memcmp(lo.data(), want_lo.data(), dim * 4), 0) << what;
  ASSERT_EQ(std::memcmp(hi.data(), want_hi.data(), dim * 4), 0) << what;
  ASSERT_EQ(lo[dim], 7.0f) << what;
  ASSERT_EQ(hi[dim], 7.0f) << what;
}

TEST(ChannelRangeTest, TheScalarLoopsBitsOnEveryTarget) {
  std::mt19937 rng(21);
  const float specials[] = {0.0f,
                            -0.0f,
                            1.0f,
                            -1.0f,
                            1e-40f,
                            -1e-40f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN()};
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (const uint32_t dim : {8u, 24u, 64u, 72u, 256u})
    for (const uint32_t n : {1u, 2u, 15u, 16u, 63u, 64u}) {
      std::vector<float> data(uint64_t{n} * dim);
      for (float& v : data)  // mostly a few values, so that ties and zeros of both signs meet
        v = rng() % 3 == 0 ? nd(rng) : specials[rng() % (rng() % 50 == 0 ? 9 : 6)];
      std::vector<const float*> rows(n);
      for (uint32_t t = 0; t < n; ++t) rows[t] = data.data() + uint64_t{t} * dim;
      std::vector<float> want_lo(rows[0], rows[0] + dim), want_hi(want_lo);
      for (uint32_t t = 1; t < n; ++t)
        for (uint32_t c = 0; c < dim; ++c) {
          want_lo[c] = std::min(want_lo[c], rows[t][c]);
          want_hi[c] = std::max(want_hi[c], rows[t][c]);
        }
      test::for_each_target([&] {
        std::vector<float> lo(dim + 1, 7.0f), hi(dim + 1, 7.0f);
        const std::string what = "dim " + std::to_string(dim) + " n " + std::to_string(n);
        channel_range(rows.data(), n, dim, lo.data(), hi.data());
        expect_range(lo, hi, want_lo, want_hi, dim, what);
        // Continued over the rest from any split: the same bits (how a reseal extends the
        // range of an earlier seal).
        for (uint32_t a = 1; a < n; a += 1 + a / 4) {
          std::fill(lo.begin(), lo.end(), 7.0f);
          std::fill(hi.begin(), hi.end(), 7.0f);
          channel_range(rows.data(), a, dim, lo.data(), hi.data());
          channel_range_extend(rows.data() + a, n - a, dim, lo.data(), hi.data());
          expect_range(lo, hi, want_lo, want_hi, dim, what + " split " + std::to_string(a));
        }
      });
    }
}

// channel_range_f16 against channel_range of the rows converted to f32: the same bits, with zeros
// of both signs meeting in every order, subnormals, the f16 extremes, and ties.
TEST(ChannelRangeTest, F16RowsGiveTheF32RowsBitsOnEveryTarget) {
  std::mt19937 rng(23);
  const uint16_t specials[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x83FF,
                               0x3C00, 0xBC00, 0x7BFF, 0xFBFF, 0x0400, 0x8400};
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (const uint32_t dim : {8u, 24u, 64u, 72u, 256u})
    for (const uint32_t n : {1u, 2u, 15u, 16u, 63u, 64u}) {
      std::vector<uint16_t> data(uint64_t{n} * dim);
      for (uint16_t& h : data)
        h = rng() % 3 == 0 ? f32_to_f16(nd(rng)) : specials[rng() % (rng() % 8 == 0 ? 12 : 4)];
      std::vector<float> wide(data.size());
      for (size_t i = 0; i < data.size(); ++i) wide[i] = f16_to_f32(data[i]);
      std::vector<const float*> rows(n);
      for (uint32_t t = 0; t < n; ++t) rows[t] = wide.data() + uint64_t{t} * dim;
      std::vector<float> want_lo(dim), want_hi(dim);
      channel_range(rows.data(), n, dim, want_lo.data(), want_hi.data());
      test::for_each_target([&] {
        std::vector<float> lo(dim + 1, 7.0f), hi(dim + 1, 7.0f);
        channel_range_f16(data.data(), n, dim, lo.data(), hi.data());
        expect_range(lo, hi, want_lo, want_hi, dim,
                     "dim " + std::to_string(dim) + " n " + std::to_string(n));
      });
    }
}

}  // namespace
}  // namespace kvs
