// int2_tcq64's trellis-coded groups (quant/kv_trellis_groups.h): the layout (a state is a window of
// the plane, wrapping), the Viterbi pass's optimum on vectors that lie on a path, the error on
// Gaussian groups against int2_had64's at the same bytes, and what becomes of zeros, NaN and
// infinities.
#include "quant/kv_trellis_groups.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/half.h"
#include "quant/kv_codecs.h"
#include "quant/kv_lowbit_groups.h"
#include "quant/trellis_codebook.h"

namespace kvs {
namespace {

constexpr uint32_t N = kTrellisGroup;

// The states of a tail-biting path of codes c: s_i = c_{i-3} c_{i-2} c_{i-1} c_i (2 bits each,
// indices mod 64).
std::vector<uint32_t> states_of(const std::vector<uint32_t>& c) {
  std::vector<uint32_t> s(N);
  for (uint32_t i = 0; i < N; ++i)
    s[i] = c[(i + N - 3) % N] << 6 | c[(i + N - 2) % N] << 4 | c[(i + N - 1) % N] << 2 | c[i];
  return s;
}

TEST(TrellisGroupTest, LevelsAreTwoPartsThatAddUpToAGaussian) {
  // Each level is its two parts (what the attention kernel's reader adds), fits int8, and the 256
  // together look Gaussian: mean near 0, the stated rms, about 68% within one rms and 95% within
  // two.
  double sum = 0, sq = 0;
  for (uint32_t s = 0; s < 256; ++s) {
    const uint32_t hi = s >> 4, lo = s & 15;
    ASSERT_EQ(kTrellisLevels[s], kTrellisPartA[hi ^ lo] + kTrellisPartB[(hi + 3 * lo) & 15]) << s;
    ASSERT_LE(std::abs(int(kTrellisLevels[s])), 126);
    sum += kTrellisLevels[s];
    sq += double(kTrellisLevels[s]) * kTrellisLevels[s];
  }
  const double rms = std::sqrt(sq / 256);
  EXPECT_NEAR(rms, kTrellisLevelRms, 1e-4);
  EXPECT_LT(std::fabs(sum / 256), 0.05 * rms);
  int one = 0, two = 0;
  for (int8_t v : kTrellisLevels) {
    one += std::fabs(v) <= rms;
    two += std::fabs(v) <= 2 * rms;
  }
  EXPECT_NEAR(one / 256.0, 0.68, 0.08);
  EXPECT_NEAR(two / 256.0, 0.95, 0.04);
}

// Code c_i sits at bits 2 (63 - i) of the plane, so element i's state is the plane's 8 bits from
// there, the last three codes wrapping around to the first elements.
TEST(TrellisGroupTest, AStateIsAWindowOfThePlaneThatWraps) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<uint32_t> c(N);
    for (uint32_t& v : c) v = rng() % 4;
    uint8_t g[kTrellisGroupBytes] = {};
    const uint16_t h = f32_to_f16(0.5f);
    std::memcpy(g, &h, 2);
    for (uint32_t i = 0; i < N; ++i) {
      const uint32_t bit = 2 * (N - 1 - i);
      g[2 + bit / 8] |= static_cast<uint8_t>(c[i] << (bit % 8));
    }
    const std::vector<uint32_t> s = states_of(c);
    float y[N];
    dequantize_trellis(g, N, y);
    for (uint32_t i = 0; i < N; ++i) {
      ASSERT_EQ(trellis_state(g, i), s[i]) << "element " << i;
      EXPECT_EQ(y[i], 0.5f * kTrellisLevelUnit * float(kTrellisLevels[s[i]]));
    }
  }
}

// A vector that is exactly the levels of a tail-biting path costs nothing: both the free pass and
// the pass held to the path's context find a path of zero error.
TEST(TrellisGroupTest, TheForwardPassFindsAPathThatFitsExactly) {
  std::mt19937 rng(6);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<uint32_t> c(N);
    for (uint32_t& v : c) v = rng() % 4;
    const std::vector<uint32_t> s = states_of(c);
    float x[N];
    for (uint32_t i = 0; i < N; ++i) x[i] = float(kTrellisLevels[s[i]]);
    float cost[kTrellisStates];
    std::vector<uint64_t> back(kTrellisBackWords);
    trellis_forward_scalar(x, -1, cost, back.data());
    EXPECT_EQ(*std::min_element(cost, cost + kTrellisStates), 0.0f);
    const int context = static_cast<int>(s[0] >> 2);
    trellis_forward_scalar(x, context, cost, back.data());
    EXPECT_EQ(cost[s[N - 1]], 0.0f);
  }
}

// The point of the format: at int2_had64's bytes, a Gaussian group's squared error relative to its
// energy falls from about 0.114 to about 0.082 (docs/kv-quantization.md).
TEST(TrellisGroupTest, SmallerErrorThanInt2Had64OnGaussians) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  double e_tcq = 0, e_had = 0, energy = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<float> x(2 * N);
    const float scale = std::pow(10.0f, float(int(rng() % 7)) - 3.0f);
    for (float& v : x) v = nd(rng) * scale;
    std::vector<uint8_t> g(2 * kTrellisGroupBytes), h(2 * lowbit_group_bytes(2, kLowBitGroup64));
    quantize_trellis(x.data(), 2 * N, g.data());
    quantize_lowbit(2, x.data(), 2 * N, h.data(), kLowBitGroup64);
    std::vector<float> yt(2 * N), yh(2 * N);
    dequantize_trellis(g.data(), 2 * N, yt.data());
    dequantize_lowbit(2, h.data(), 2 * N, yh.data(), kLowBitGroup64);
    for (uint32_t i = 0; i < 2 * N; ++i) {
      const double s2 = double(scale) * scale;
      e_tcq += (double(x[i]) - yt[i]) * (double(x[i]) - yt[i]) / s2;
      e_had += (double(x[i]) - yh[i]) * (double(x[i]) - yh[i]) / s2;
      energy += double(x[i]) * x[i] / s2;
    }
  }
  const double rel_tcq = e_tcq / energy, rel_had = e_had / energy;
  EXPECT_LT(rel_tcq, 0.09);
  EXPECT_GT(rel_had, 0.105);
  EXPECT_LT(rel_tcq, 0.8 * rel_had);
}

// The scale is an f16 within the searched range of the group's rms, and the error small. The
// path is tail-biting: the first three elements' states are read through the plane's wrap, from
// the last elements' codes, and they fit as well as the rest (a path that did not close would
// give them levels the writer never chose).
TEST(TrellisGroupTest, ScaleNearTheRmsAndThePathClosesAtTheWrap) {
  std::mt19937 rng(8);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  double first_err = 0, rest_err = 0;
  for (int trial = 0; trial < 50; ++trial) {
    float x[N];
    double sq = 0;
    for (float& v : x) {
      v = nd(rng);
      sq += double(v) * v;
    }
    const double rms = std::sqrt(sq / N);
    uint8_t g[kTrellisGroupBytes];
    quantize_trellis(x, N, g);
    const float d = load_f16_scale(g);
    EXPECT_EQ(f16_to_f32(f32_to_f16(d)), d);
    EXPECT_GE(d * kTrellisLevelUnit, 0.79 * rms / kTrellisLevelRms);
    EXPECT_LE(d * kTrellisLevelUnit, 1.13 * rms / kTrellisLevelRms);
    float y[N];
    dequantize_trellis(g, N, y);
    double err = 0;
    for (uint32_t i = 0; i < N; ++i) {
      const double e = (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
      err += e;
      (i < 3 ? first_err : rest_err) += e / (rms * rms);
    }
    EXPECT_LT(std::sqrt(err / N), 0.33 * rms) << "trial " << trial;
  }
  // Per element, over the trials: the wrapped three within 2x of the others (about 0.08 of the
  // energy each; an unclosed path would put them near 1 or above).
  EXPECT_LT(first_err / 3, 2 * rest_err / (N - 3));
}

TEST(TrellisGroupTest, ZerosNaNAndInfinities) {
  float x[N] = {};
  uint8_t g[kTrellisGroupBytes];
  float y[N];
  quantize_trellis(x, N, g);
  EXPECT_EQ(load_f16_scale(g), 0.0f);
  dequantize_trellis(g, N, y);
  for (float v : y) EXPECT_EQ(v, 0.0f);

  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (float& v : x) v = nd(rng);
  x[3] = std::numeric_limits<float>::quiet_NaN();
  x[10] = std::numeric_limits<float>::infinity();
  x[20] = -std::numeric_limits<float>::infinity();
  quantize_trellis(x, N, g);
  dequantize_trellis(g, N, y);
  for (float v : y) EXPECT_TRUE(std::isfinite(v));
  EXPECT_EQ(load_f16_scale(g), 65504.0f);  // the largest f16: the infinities' scale, clamped
  EXPECT_GT(y[10], 0.0f);
  EXPECT_LT(y[20], 0.0f);

  // Too small for an f16 scale: stored as zeros, not as noise.
  for (float& v : x) v = nd(rng) * 1e-12f;
  quantize_trellis(x, N, g);
  dequantize_trellis(g, N, y);
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace kvs
