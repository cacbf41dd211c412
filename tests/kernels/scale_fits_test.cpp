#include "kernels/scale_fits.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/half.h"
#include "kernels/kernel_test_util.h"
#include "quant/kv_codecs.h"
#include "quant/kv_lowbit_groups.h"
#include "quant/scale_fits.h"

namespace kvs {
namespace {

constexpr uint32_t G = kScaleFitGroup;
constexpr ScaleLevels kAllLevels[] = {ScaleLevels::kInt4, ScaleLevels::kLowBit2,
                                      ScaleLevels::kLowBit3};

// Groups as the writers see them (finite), of every shape that moves a rounding: Gaussian over
// many magnitudes, an outlier, values on a level grid (ties), all zero, near f16's smallest
// scale, powers of two, one sign.
std::vector<float> random_group(int kind, std::mt19937& rng) {
  const float scale = std::pow(10.0f, static_cast<float>(static_cast<int>(rng() % 14)) - 7.0f);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> x(G);
  for (float& v : x) v = nd(rng);
  switch (kind % 7) {
    case 1: x[rng() % G] *= 40.0f; break;
    case 2:
      for (float& v : x) v = static_cast<float>(static_cast<int>(rng() % 17) - 8) * scale * 0.5f;
      break;
    case 3: std::fill(x.begin(), x.end(), 0.0f); break;
    case 4:
      for (float& v : x) v *= 1e-33f;
      break;
    case 5:
      for (float& v : x)
        v = std::ldexp(1.0f, static_cast<int>(rng() % 20)) * scale * (rng() % 2 ? 0.25f : -0.25f);
      break;
    case 6:
      for (float& v : x) v = std::fabs(v);
      break;
    default: break;
  }
  return x;
}

bool same_bits(const ScaleFit& a, const ScaleFit& b) {
  return std::memcmp(&a.err, &b.err, 8) == 0 && std::memcmp(&a.worst, &b.worst, 4) == 0 &&
         std::memcmp(&a.xl, &b.xl, 8) == 0 && std::memcmp(&a.ll, &b.ll, 8) == 0;
}

// Each lane adds its terms in the scalar loop's order, so every target gives its bits: the
// searched formats' stored bytes do not depend on the CPU.
TEST(ScaleFits, SameBitsAsScalarOnEveryTarget) {
  std::mt19937 rng(11);
  for (int t = 0; t < 600; ++t) {
    const std::vector<float> x = random_group(t, rng);
    float amax = 0;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    for (ScaleLevels levels : kAllLevels) {
      // Scales as the quantizers try them (f16 values near amax / levels), and odd ones: zero,
      // negative (int4's carry the extreme element's sign), the smallest f16, the largest.
      std::vector<float> d;
      for (uint32_t c = 0; d.size() < kMaxScaleFits; ++c)
        d.push_back(f16_to_f32(f32_to_f16(std::min(65504.0f, amax * (0.05f + 0.03f * c)))));
      d[3] = 0.0f;
      d[4] = levels == ScaleLevels::kInt4 ? -d[5] : 65504.0f;
      d[6] = f16_to_f32(1);  // 2^-24
      for (uint32_t k : {1u, 5u, 11u, 16u})
        for (bool sums : {true, false}) {
          std::vector<ScaleFit> want(k), got(k);
          scale_fits_scalar(levels, x.data(), d.data(), k, sums, want.data());
          test::for_each_target([&] {
            scale_fits(levels, x.data(), d.data(), k, sums, got.data());
            for (uint32_t c = 0; c < k; ++c)
              ASSERT_TRUE(same_bits(got[c], want[c]))
                  << "group " << t << " levels " << int(levels) << " k " << k << " candidate " << c
                  << ": err " << got[c].err << " vs " << want[c].err << ", worst " << got[c].worst
                  << " vs " << want[c].worst << ", xl " << got[c].xl << " vs " << want[c].xl
                  << ", ll " << got[c].ll << " vs " << want[c].ll << " d " << d[c];
          });
        }
    }
  }
}

// The whole quantizers with the lanes' fits store the scalar ones' bytes, non-finite input
// included.
TEST(ScaleFits, QuantizersStoreTheScalarBytesOnEveryTarget) {
  std::mt19937 rng(12);
  for (int t = 0; t < 400; ++t) {
    std::vector<float> x;
    for (int g = 0; g < 4; ++g) {
      const std::vector<float> group = random_group(t + g, rng);
      x.insert(x.end(), group.begin(), group.end());
    }
    if (t % 5 == 0) {
      x[rng() % x.size()] = INFINITY;
      x[rng() % x.size()] = -INFINITY;
      x[rng() % x.size()] = NAN;
    }
    const uint32_t n = static_cast<uint32_t>(x.size());
    std::vector<uint8_t> want4(n / G * GroupQ4Traits::kGroupBytes), got4(want4.size());
    quantize_int4(x.data(), n, want4.data());
    std::vector<uint8_t> want2(n / G * lowbit_group_bytes(2)), got2(want2.size());
    std::vector<uint8_t> want3(n / G * lowbit_group_bytes(3)), got3(want3.size());
    std::vector<uint8_t> want64(n / kLowBitGroup64 * lowbit_group_bytes(2, kLowBitGroup64)),
        got64(want64.size());
    quantize_lowbit(2, x.data(), n, want2.data());
    quantize_lowbit(3, x.data(), n, want3.data());
    quantize_lowbit(2, x.data(), n, want64.data(), kLowBitGroup64);
    test::for_each_target([&] {
      quantize_int4_with(x.data(), n, got4.data(), scale_fits);
      quantize_lowbit_with(2, x.data(), n, got2.data(), scale_fits);
      quantize_lowbit_with(3, x.data(), n, got3.data(), scale_fits);
      quantize_lowbit_with(2, x.data(), n, got64.data(), scale_fits, kLowBitGroup64);
      ASSERT_EQ(got4, want4) << "int4, vector " << t;
      ASSERT_EQ(got2, want2) << "2-bit, vector " << t;
      ASSERT_EQ(got3, want3) << "3-bit, vector " << t;
      ASSERT_EQ(got64, want64) << "2-bit over 64, vector " << t;
    });
  }
}

// A fit is what the stored block decodes to: the chosen scale's err and worst are the squared and
// the largest error of the decoded group, and no candidate the search tried that qualifies beats
// it (the fits are what the search compares, so a wrong fit would store a worse block).
TEST(ScaleFits, TheStoredBlocksErrorIsItsScalesFit) {
  std::mt19937 rng(13);
  for (int t = 0; t < 300; ++t) {
    const std::vector<float> x = random_group(t, rng);
    uint8_t block[GroupQ4Traits::kGroupBytes];
    quantize_int4_with(x.data(), G, block, scale_fits);
    float y[G];
    dequantize_q4(block, G, y);
    double err = 0;
    float worst = 0;
    for (uint32_t i = 0; i < G; ++i) {
      const double e = double(x[i]) - double(y[i]);
      err += e * e;
      worst = std::max(worst, static_cast<float>(std::fabs(e)));
    }
    const float d = load_f16_scale(block);
    ScaleFit fit;
    scale_fits(ScaleLevels::kInt4, x.data(), &d, 1, true, &fit);
    ASSERT_NEAR(fit.err, err, 1e-6 * err + 1e-300) << "group " << t;
    ASSERT_EQ(fit.worst, worst) << "group " << t;
    // q4_0's scale (the extreme element on level -8) is a candidate: never better than the
    // stored one.
    float m = 0;
    for (float v : x)
      if (std::fabs(v) > std::fabs(m)) m = v;
    const float q40 = f16_to_f32(f32_to_f16(std::clamp(m / -8.0f, -65504.0f, 65504.0f)));
    ScaleFit plain;
    scale_fits(ScaleLevels::kInt4, x.data(), &q40, 1, false, &plain);
    ASSERT_LE(fit.err, plain.err) << "group " << t;
  }
}

}  // namespace
}  // namespace kvs
