// KV element codecs: fp8 conversions against a brute-force nearest-value oracle, and the
// round-trip error of every codec within its stated bound (quant/kv_codecs.h) on random and
// adversarial data: zeros, outliers, denormals, values beyond the format's range, inf, NaN.
#include "quant/kv_codecs.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "quant/fp8.h"
#include "quant/hadamard.h"

namespace kvs {
namespace {

// ---- fp8 -----------------------------------------------------------------------------------

template <class F>
std::vector<float> all_finite_values() {
  std::vector<float> v;
  for (int c = 0; c <= F::kMaxCode; ++c) v.push_back(fp8_decode<F>(static_cast<uint8_t>(c)));
  return v;
}

// Nearest representable value of |x| by exhaustive search, ties to the even code.
template <class F>
uint8_t nearest_code(float x) {
  const std::vector<float> vals = all_finite_values<F>();
  const double a = std::fabs(double(x));
  int best = 0;
  for (int c = 1; c < static_cast<int>(vals.size()); ++c) {
    const double d = std::fabs(vals[c] - a), db = std::fabs(vals[best] - a);
    if (d < db || (d == db && (c & 1) == 0)) best = c;
  }
  return static_cast<uint8_t>((std::signbit(x) ? 0x80 : 0) | best);
}

TEST(Fp8Test, E4M3KnownValues) {
  EXPECT_EQ(fp8_e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(fp8_e4m3_to_f32(0xB8), -1.0f);
  EXPECT_EQ(fp8_e4m3_from_f32(1.0625f), 0x38);  // tie between 1.0 and 1.125 -> even (1.0)
  EXPECT_EQ(fp8_e4m3_from_f32(1.1875f), 0x3A);  // tie between 1.125 and 1.25 -> 1.25
  EXPECT_EQ(fp8_e4m3_from_f32(-0.0f), 0x80);
}

TEST(Fp8Test, E5M2IsTheTopByteOfF16) {
  for (int c = 0; c <= 0x7B; ++c) {
    uint32_t f16_bits = static_cast<uint32_t>(c) << 8;
    // f16 -> f32 by value: sign 0, exponent 5 bits, mantissa 10 bits.
    const int e = (f16_bits >> 10) & 31, m = f16_bits & 1023;
    const float v = e == 0 ? std::ldexp(float(m), -24) : std::ldexp(float(1024 + m), e - 25);
    EXPECT_EQ(fp8_e5m2_to_f32(static_cast<uint8_t>(c)), v) << c;
  }
  EXPECT_EQ(fp8_e5m2_to_f32(0x7B), 57344.0f);
}

template <class F>
void check_all_codes_round_trip() {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) > F::kMaxCode) continue;  // NaN/Inf patterns are never produced
    const float v = fp8_decode<F>(static_cast<uint8_t>(c));
    EXPECT_EQ(fp8_encode<F>(v), c) << c;
  }
}
TEST(Fp8Test, EveryCodeRoundTrips) {
  check_all_codes_round_trip<Fp8E4M3>();
  check_all_codes_round_trip<Fp8E5M2>();
}

template <class F>
void check_nearest(std::mt19937& rng) {
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-22, 18);
  for (int i = 0; i < 20000; ++i) {
    float x = std::ldexp(mant(rng), ex(rng));
    if (std::fabs(x) >= F::kMax) continue;
    ASSERT_EQ(fp8_encode<F>(x), nearest_code<F>(x)) << x;
  }
  // Exact midpoints between neighbours: ties to even.
  const std::vector<float> vals = all_finite_values<F>();
  for (size_t c = 0; c + 1 < vals.size(); ++c) {
    const float mid = 0.5f * (vals[c] + vals[c + 1]);
    ASSERT_EQ(fp8_encode<F>(mid), (c & 1) ? c + 1 : c) << mid;
    ASSERT_EQ(fp8_encode<F>(-mid), 0x80 | ((c & 1) ? c + 1 : c)) << -mid;
  }
}
TEST(Fp8Test, EncodeIsRoundToNearestEven) {
  std::mt19937 rng(7);
  check_nearest<Fp8E4M3>(rng);
  check_nearest<Fp8E5M2>(rng);
}

template <class F>
void check_saturation() {
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {F::kMax, F::kMax * 1.01f, F::kMax * 1e6f, 3.4e38f, inf}) {
    EXPECT_EQ(fp8_decode<F>(fp8_encode<F>(x)), F::kMax) << x;
    EXPECT_EQ(fp8_decode<F>(fp8_encode<F>(-x)), -F::kMax) << x;
  }
  EXPECT_EQ(fp8_decode<F>(fp8_encode<F>(std::nanf(""))), 0.0f);
  // f32 denormals and tiny values: below half the smallest subnormal -> zero.
  EXPECT_EQ(fp8_decode<F>(fp8_encode<F>(1e-40f)), 0.0f);
  EXPECT_EQ(fp8_decode<F>(fp8_encode<F>(-1e-40f)), 0.0f);
  // Whatever the input, the stored code decodes to a finite value (the format's inf/NaN codes,
  // where it has them, are never written): every f16 value, both signs, plus the extremes.
  for (uint32_t h = 0; h < 65536; ++h) {
    const float x = f16_to_f32(static_cast<uint16_t>(h));
    ASSERT_TRUE(std::isfinite(fp8_decode<F>(fp8_encode<F>(x)))) << x;
  }
  for (float x : {inf, -inf, 3.4e38f, -3.4e38f, std::nanf("")})
    EXPECT_TRUE(std::isfinite(fp8_decode<F>(fp8_encode<F>(x)))) << x;
}
TEST(Fp8Test, SaturatesNeverInfOrNan) {
  check_saturation<Fp8E4M3>();
  check_saturation<Fp8E5M2>();
}

// ---- vector codecs ---------------------------------------------------------------------------

struct Codec {
  std::string name;
  uint32_t bytes_per_32;  // bytes for 32 elements (n is always a multiple of 32 here)
  uint32_t vector_extra;  // scale bytes per vector
  std::function<void(const float*, uint32_t, uint8_t*)> quantize;
  std::function<void(const uint8_t*, uint32_t, float*)> dequantize;
  // Stated bound for element x given amax (the vector's or its group's), kv_codecs.h.
  std::function<double(double x, double amax)> bound;
  bool grouped;
};

constexpr double kAbs = 1.0 / (1 << 18);
constexpr double kScaleTol = 1.0 + 1.0 / 512;

double fp8_bound(double x, double rel, double max, double sub) {
  const double a = std::fabs(x);
  if (a >= max) return a - max;  // saturated
  return std::max(rel * a, sub / 2) * 1.0000001;
}

std::vector<Codec> codecs() {
  return {
      {"fp8_e4m3", 32, 0, quantize_fp8_e4m3, dequantize_fp8_e4m3,
       [](double x, double) { return fp8_bound(x, 1.0 / 16, 448, std::ldexp(1.0, -9)); }, false},
      {"fp8_e5m2", 32, 0, quantize_fp8_e5m2, dequantize_fp8_e5m2,
       [](double x, double) { return fp8_bound(x, 1.0 / 8, 57344, std::ldexp(1.0, -16)); }, false},
      {"fp8_e4m3_dyn", 32, 2, quantize_fp8_e4m3_dyn, dequantize_fp8_e4m3_dyn,
       [](double x, double amax) {
         return std::fabs(x) / 16 + amax / 448 * std::ldexp(1.0, -10) + kAbs;
       },
       false},
      {"int8", 32, 2, quantize_int8, dequantize_int8,
       [](double, double amax) { return amax / 254 * kScaleTol + kAbs; }, false},
      {"int4", 18, 0, quantize_int4, dequantize_q4,
       [](double, double amax) { return amax / 4 * kScaleTol + kAbs; }, true},
      {"q4_0", 18, 0, quantize_q4_0, dequantize_q4,
       [](double, double amax) { return amax / 8 * kScaleTol + kAbs; }, true},
      {"q8_0", 34, 0, quantize_q8_0, dequantize_q8_0,
       [](double, double amax) { return amax / 254 * kScaleTol + kAbs; }, true},
  };
}

uint64_t codec_bytes(const Codec& c, uint32_t n) {
  return n / 32 * c.bytes_per_32 + c.vector_extra;
}

// Quantizes x, checks the bound element-wise and that nothing decodes to NaN/Inf.
void check_round_trip(const Codec& c, const std::vector<float>& x, const std::string& what) {
  const uint32_t n = static_cast<uint32_t>(x.size());
  std::vector<uint8_t> q(codec_bytes(c, n) + 8, 0xAB);
  c.quantize(x.data(), n, q.data());
  for (size_t i = codec_bytes(c, n); i < q.size(); ++i)
    ASSERT_EQ(q[i], 0xAB) << c.name << ": wrote past the vector's bytes";
  std::vector<float> y(n);
  c.dequantize(q.data(), n, y.data());
  const uint32_t span = c.grouped ? 32 : n;
  for (uint32_t g = 0; g < n; g += span) {
    double amax = 0;
    for (uint32_t i = g; i < g + span; ++i)
      if (std::isfinite(x[i])) amax = std::max(amax, std::fabs(double(x[i])));
    for (uint32_t i = g; i < g + span; ++i) {
      ASSERT_TRUE(std::isfinite(y[i])) << c.name << " " << what << " element " << i;
      if (!std::isfinite(x[i])) continue;
      const double err = std::fabs(double(x[i]) - y[i]);
      ASSERT_LE(err, c.bound(x[i], amax)) << c.name << " " << what << " element " << i
                                          << " x=" << x[i] << " y=" << y[i] << " amax=" << amax;
    }
  }
}

TEST(KvCodecsTest, RandomDataWithinBound) {
  std::mt19937 rng(42);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ue(-12.0f, 8.0f);
  for (const Codec& c : codecs())
    for (uint32_t n : {32u, 64u, 128u, 256u})
      for (int rep = 0; rep < 200; ++rep) {
        const float mag = std::exp2(ue(rng));
        std::vector<float> x(n);
        for (auto& v : x) v = nd(rng) * mag;
        check_round_trip(c, x, "random n=" + std::to_string(n));
      }
}

TEST(KvCodecsTest, AdversarialData) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const float inf = std::numeric_limits<float>::infinity();
  for (const Codec& c : codecs()) {
    const uint32_t n = 64;
    std::vector<std::pair<std::string, std::vector<float>>> cases;
    cases.push_back({"zeros", std::vector<float>(n, 0.0f)});
    cases.push_back({"negative zeros", std::vector<float>(n, -0.0f)});
    std::vector<float> x(n);
    for (auto& v : x) v = nd(rng);
    x[5] = 1000.0f;
    cases.push_back({"one outlier", x});
    for (auto& v : x) v = nd(rng) * 1e-40f;  // f32 denormals
    cases.push_back({"denormals", x});
    for (auto& v : x) v = nd(rng) * 1e-6f;  // below f16's normal range for the scales
    cases.push_back({"tiny", x});
    for (auto& v : x) v = nd(rng) * 1e5f;  // beyond e4m3's range
    cases.push_back({"large", x});
    for (auto& v : x) v = nd(rng) * 1e30f;  // beyond every f16 scale
    cases.push_back({"huge", x});
    for (uint32_t i = 0; i < n; ++i) x[i] = (i % 2 ? -1.0f : 1.0f) * 7.0f;
    cases.push_back({"alternating", x});
    for (uint32_t i = 0; i < n; ++i) x[i] = float(i) - 31.5f;
    cases.push_back({"ramp", x});
    for (auto& v : x) v = nd(rng);
    x[3] = inf;
    x[9] = -inf;
    x[11] = std::nanf("");
    cases.push_back({"inf and nan", x});
    for (const auto& [what, data] : cases) {
      if (what == "huge" || what == "inf and nan" ||
          (what == "large" && !c.grouped && c.name != "int8" && c.name != "fp8_e4m3_dyn")) {
        // Saturation: only check that every decoded value is finite (and fp8's saturation
        // bound, which check_round_trip handles for fp8_e4m3/e5m2).
        const uint32_t m = static_cast<uint32_t>(data.size());
        std::vector<uint8_t> q(codec_bytes(c, m));
        c.quantize(data.data(), m, q.data());
        std::vector<float> y(m);
        c.dequantize(q.data(), m, y.data());
        for (uint32_t i = 0; i < m; ++i)
          ASSERT_TRUE(std::isfinite(y[i])) << c.name << " " << what << " element " << i;
        if (what == "large") check_round_trip(c, data, what);
        continue;
      }
      check_round_trip(c, data, what);
    }
  }
}

TEST(KvCodecsTest, ZerosDecodeToExactZeros) {
  for (const Codec& c : codecs()) {
    std::vector<float> x(64, 0.0f), y(64, 1.0f);
    std::vector<uint8_t> q(codec_bytes(c, 64));
    c.quantize(x.data(), 64, q.data());
    c.dequantize(q.data(), 64, y.data());
    for (float v : y) ASSERT_EQ(v, 0.0f) << c.name;
  }
}

TEST(KvCodecsTest, Int8HitsBothEndsExactly) {
  std::vector<float> x(64, 0.5f);
  x[0] = -3.0f;
  x[1] = 3.0f;
  std::vector<uint8_t> q(66);
  quantize_int8(x.data(), 64, q.data());
  EXPECT_EQ(static_cast<int8_t>(q[0]), -127);
  EXPECT_EQ(static_cast<int8_t>(q[1]), 127);
}

TEST(KvCodecsTest, Int4NeverWorseThanQ4_0) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::student_t_distribution<float> heavy(3.0f);
  double sse_int4 = 0, sse_q4 = 0;
  for (int rep = 0; rep < 2000; ++rep) {
    std::vector<float> x(32);
    for (auto& v : x) v = rep % 2 ? nd(rng) : heavy(rng);
    uint8_t a[18], b[18];
    quantize_int4(x.data(), 32, a);
    quantize_q4_0(x.data(), 32, b);
    float ya[32], yb[32];
    dequantize_q4(a, 32, ya);
    dequantize_q4(b, 32, yb);
    double ea = 0, eb = 0;
    for (int i = 0; i < 32; ++i) {
      ea += (x[i] - ya[i]) * double(x[i] - ya[i]);
      eb += (x[i] - yb[i]) * double(x[i] - yb[i]);
    }
    ASSERT_LE(ea, eb * (1 + 1e-9)) << rep;
    sse_int4 += ea;
    sse_q4 += eb;
  }
  // On Gaussian and heavy-tailed groups the searched scale is measurably better.
  EXPECT_LT(sse_int4, 0.95 * sse_q4);
}

TEST(KvCodecsTest, Fp8DynUsesTheFullRange) {
  std::vector<float> x(64, 0.001f);
  x[7] = -0.25f;
  std::vector<uint8_t> q(66);
  quantize_fp8_e4m3_dyn(x.data(), 64, q.data());
  std::vector<float> y(64);
  dequantize_fp8_e4m3_dyn(q.data(), 64, y.data());
  EXPECT_NEAR(y[7], -0.25f, 0.25f * 1e-3);
  EXPECT_NEAR(y[0], 0.001f, 0.001f / 16);  // per-tensor scale 1.0 would give 2^-10 steps here
}

TEST(HadamardTest, OrthonormalAndItsOwnInverse) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (uint32_t n : {1u, 2u, 32u, 64u, 128u, 256u}) {
    std::vector<float> x(n), y;
    for (auto& v : x) v = nd(rng);
    x[0] = 40.0f;  // an outlier channel is spread over all of them
    y = x;
    hadamard_inplace(y.data(), n);
    double nx = 0, ny = 0, ymax = 0;
    for (uint32_t i = 0; i < n; ++i) {
      nx += double(x[i]) * x[i];
      ny += double(y[i]) * y[i];
      ymax = std::max(ymax, double(std::fabs(y[i])));
    }
    EXPECT_NEAR(ny, nx, 1e-4 * nx);
    if (n >= 64) {
      EXPECT_LT(ymax, 40.0 / 4);
    }
    hadamard_inplace(y.data(), n);
    for (uint32_t i = 0; i < n; ++i) EXPECT_NEAR(y[i], x[i], 1e-4) << n << " " << i;
  }
}

}  // namespace
}  // namespace kvs
