// 3- and 2-bit groups (quant/kv_lowbit_groups.h): the layout, the stated bound, the searched
// scale against the unclipped one, and what becomes of NaN and infinities.
#include "quant/kv_lowbit_groups.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/half.h"
#include "quant/kv_codecs.h"

namespace kvs {
namespace {

TEST(LowBitGroupTest, BytesPerGroup) {
  EXPECT_EQ(lowbit_group_bytes(2), 10u);
  EXPECT_EQ(lowbit_group_bytes(3), 14u);
  EXPECT_EQ(lowbit_group_bytes(2, kLowBitGroup64), 18u);
}

// int2_had64's group: one scale, then the two 32-element planes of int2_had one after the other.
TEST(LowBitGroupTest, SixtyFourElementsShareOneScaleAndTwoPlanes) {
  float x[64];
  for (uint32_t i = 0; i < 64; ++i) x[i] = float(2 * int((i * 7) % 4) - 3);  // every level, d = 1
  uint8_t g[18] = {};
  quantize_lowbit(2, x, 64, g, kLowBitGroup64);
  ASSERT_EQ(load_f16_scale(g), 1.0f);
  for (uint32_t i = 0; i < 64; ++i) {
    uint64_t low;
    std::memcpy(&low, g + 2 + 8 * (i / 32), 8);
    EXPECT_EQ((low >> (2 * (i % 32))) & 3u, (i * 7) % 4) << "element " << i;
    EXPECT_EQ(lowbit_code(2, g, i), (i * 7) % 4);
  }
  float y[64];
  dequantize_lowbit(2, g, 64, y, kLowBitGroup64);
  for (uint32_t i = 0; i < 64; ++i) EXPECT_EQ(y[i], x[i]);
}

// One scale per 64 elements: every element within amax / 2 of the 64's amax, and on Gaussian
// groups a squared error within a few percent of int2_had's two scales (the price of 2 bytes).
TEST(LowBitGroupTest, OneScalePerSixtyFourCostsLittleOnGaussians) {
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  double sse64 = 0, sse32 = 0, energy = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    float x[128];
    for (float& e : x) e = nd(rng);
    uint8_t g64[36], g32[40];
    quantize_lowbit(2, x, 128, g64, kLowBitGroup64);
    quantize_lowbit(2, x, 128, g32);
    float y64[128], y32[128];
    dequantize_lowbit(2, g64, 128, y64, kLowBitGroup64);
    dequantize_lowbit(2, g32, 128, y32);
    for (uint32_t h = 0; h < 2; ++h) {
      float amax = 0;
      for (uint32_t i = 0; i < 64; ++i) amax = std::max(amax, std::fabs(x[64 * h + i]));
      for (uint32_t i = 0; i < 64; ++i)
        ASSERT_LE(std::fabs(x[64 * h + i] - y64[64 * h + i]), amax / 2 * (1 + 1e-3f))
            << "trial " << trial << " element " << 64 * h + i;
    }
    for (uint32_t i = 0; i < 128; ++i) {
      sse64 += double(x[i] - y64[i]) * (x[i] - y64[i]);
      sse32 += double(x[i] - y32[i]) * (x[i] - y32[i]);
      energy += double(x[i]) * x[i];
    }
  }
  std::printf("[ 2 bits ] relative squared error over 64: %.4f, over 32: %.4f\n", sse64 / energy,
              sse32 / energy);
  EXPECT_LT(sse64 / energy, 0.118);
  EXPECT_LT(sse64, 1.08 * sse32);  // 0.1146 against 0.1078 (2026-12-05)
}

// The codes sit where the header says: element i's low two bits at bits 2i of the 64-bit plane
// after the scale, its third bit at bit i of the 32-bit plane after that.
TEST(LowBitGroupTest, LayoutIsTheStatedBitPlanes) {
  for (const uint32_t bits : {2u, 3u}) {
    const int top = (1 << bits) - 1;
    // Every level once or more, in a known order: x_i = level (i mod 2^bits) with d = 1.
    float x[32];
    for (uint32_t i = 0; i < 32; ++i) x[i] = float(2 * int(i % (top + 1)) - top);
    uint8_t g[14] = {};
    quantize_lowbit(bits, x, 32, g);
    ASSERT_EQ(load_f16_scale(g), 1.0f) << bits;
    uint64_t low;
    std::memcpy(&low, g + 2, 8);
    uint32_t high = 0;
    if (bits == 3) std::memcpy(&high, g + 10, 4);
    for (uint32_t i = 0; i < 32; ++i) {
      const uint32_t c = i % (top + 1);
      EXPECT_EQ((low >> (2 * i)) & 3u, c & 3u) << "bits " << bits << " element " << i;
      if (bits == 3) {
        EXPECT_EQ((high >> i) & 1u, c >> 2) << "element " << i;
      }
      EXPECT_EQ(lowbit_code(bits, g, i), c);
    }
    float y[32];
    dequantize_lowbit(bits, g, 32, y);
    for (uint32_t i = 0; i < 32; ++i) EXPECT_EQ(y[i], x[i]);
  }
}

// Every element within amax / 2^(bits - 1) of its value, and the group's squared error never
// above the unclipped scale's (d = amax / (2^bits - 1)), on data with and without outliers.
TEST(LowBitGroupTest, WithinTheBoundAndNeverWorseThanTheUnclippedScale) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const uint32_t bits : {2u, 3u}) {
    const int top = (1 << bits) - 1;
    double sse = 0, sse_plain = 0, energy = 0;
    for (int trial = 0; trial < 2000; ++trial) {
      float x[64];
      const float spread = std::exp2(float(trial % 20) - 10.0f);
      for (float& e : x) e = spread * nd(rng);
      const bool outlier = trial % 5 == 0;
      if (outlier) x[trial % 64] *= 8.0f;
      uint8_t g[28];
      quantize_lowbit(bits, x, 64, g);
      float y[64];
      dequantize_lowbit(bits, g, 64, y);
      for (uint32_t h = 0; h < 2; ++h) {
        float amax = 0;
        for (uint32_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[32 * h + i]));
        // The unclipped scale, rounded up to f16, the reference the search must not lose to.
        uint16_t dh = f32_to_f16(amax / float(top));
        if (f16_to_f32(dh) < amax / float(top)) ++dh;
        const float d = f16_to_f32(dh);
        double group = 0, plain = 0;
        for (uint32_t i = 0; i < 32; ++i) {
          const float v = x[32 * h + i];
          const float err = std::fabs(v - y[32 * h + i]);
          ASSERT_LE(err, amax / float(1 << (bits - 1)) * (1 + 1e-3f) + 1e-7f)
              << "bits " << bits << " trial " << trial << " element " << 32 * h + i;
          group += double(err) * err;
          const float c =
              std::clamp(std::floor(v / (2 * d) + 0.5f * float(top + 1)), 0.0f, float(top));
          const double e2 = v - d * (2 * c - top);
          plain += e2 * e2;
          if (!outlier) energy += double(v) * v / (spread * spread);
        }
        EXPECT_LE(group, plain * (1 + 1e-6) + 1e-30) << "bits " << bits << " trial " << trial;
        if (!outlier) {  // the Gaussian groups
          sse += group / (spread * spread);
          sse_plain += plain / (spread * spread);
        }
      }
    }
    // The search pays: on Gaussian data the clipped scales beat the unclipped one clearly, and
    // the error is near the best uniform quantizer of a Gaussian (0.119 at 2 bits, 0.037 at 3).
    const double rel = sse / energy;
    std::printf("[ %u bits ] relative squared error %.4f (unclipped scale %.4f)\n", bits, rel,
                sse_plain / energy);
    EXPECT_LT(sse, 0.9 * sse_plain) << bits;
    EXPECT_LT(rel, bits == 2 ? 0.125 : 0.040) << bits;
  }
}

TEST(LowBitGroupTest, NanIsZeroAndInfinitiesSaturate) {
  const float inf = std::numeric_limits<float>::infinity();
  for (const uint32_t bits : {2u, 3u}) {
    float x[32] = {};
    x[0] = std::numeric_limits<float>::quiet_NaN();
    x[1] = inf;
    x[2] = -inf;
    x[3] = 1.0f;
    uint8_t g[14];
    quantize_lowbit(bits, x, 32, g);
    float y[32];
    dequantize_lowbit(bits, g, 32, y);
    for (const float v : y) EXPECT_TRUE(std::isfinite(v)) << bits;
    EXPECT_GT(y[1], 0.0f);
    EXPECT_LT(y[2], 0.0f);
    EXPECT_EQ(std::fabs(y[1]), std::fabs(y[2]));
    EXPECT_LE(std::fabs(y[0]), load_f16_scale(g));  // the level nearest 0
  }
}

// All zeros: a zero scale, and zeros back.
TEST(LowBitGroupTest, ZerosStayZero) {
  for (const uint32_t bits : {2u, 3u}) {
    const float x[32] = {};
    uint8_t g[14];
    quantize_lowbit(bits, x, 32, g);
    EXPECT_EQ(load_f16_scale(g), 0.0f);
    float y[32];
    dequantize_lowbit(bits, g, 32, y);
    for (const float v : y) EXPECT_EQ(v, 0.0f);
  }
}

}  // namespace
}  // namespace kvs
