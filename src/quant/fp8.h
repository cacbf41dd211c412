// FP8 element codecs (OCP 8-bit floating point): scalar reference conversions.
//
//   e4m3 ("e4m3fn"): sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities, one NaN
//                    pattern (S.1111.111); largest finite 448, smallest normal 2^-6,
//                    smallest subnormal 2^-9.
//   e5m2:            sign, 5 exponent bits (bias 15), 2 mantissa bits; the top byte of an IEEE
//                    f16; largest finite 57344, smallest normal 2^-14, smallest subnormal 2^-16.
//
// Encoding rounds to nearest even and SATURATES: |x| >= the largest finite value (including
// +-inf) encodes as +-largest finite; NaN encodes as +0. So the cache never holds NaN or Inf.
// Error bounds of encode+decode (what the tests check):
//   normal range:     |x - y| <= 2^-(M+1) * |x|   (e4m3: 1/16, e5m2: 1/8 of |x|)
//   subnormal range:  |x - y| <= smallest subnormal / 2
//   saturated:        y = +-largest finite
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace kvs {

template <int kExpBits, int kMantBits>
struct Fp8Format {
  static constexpr int kExp = kExpBits;
  static constexpr int kMant = kMantBits;
  static constexpr int kBias = (1 << (kExpBits - 1)) - 1;
  static constexpr int kMinNormalExp = 1 - kBias;  // exponent of the smallest normal
};
// e4m3: exponent field 15 is finite (only mantissa 111 is NaN), so the top code is 0x7E.
struct Fp8E4M3 : Fp8Format<4, 3> {
  static constexpr uint8_t kMaxCode = 0x7E;
  static constexpr float kMax = 448.0f;
};
// e5m2: exponent field 31 is inf/NaN as in IEEE, so the top finite code is 0x7B.
struct Fp8E5M2 : Fp8Format<5, 2> {
  static constexpr uint8_t kMaxCode = 0x7B;
  static constexpr float kMax = 57344.0f;
};

template <class F>
[[nodiscard]] inline float fp8_decode(uint8_t b) {
  const int e = (b >> F::kMant) & ((1 << F::kExp) - 1);
  const int m = b & ((1 << F::kMant) - 1);
  const float mag =
      e == 0 ? std::ldexp(static_cast<float>(m), F::kMinNormalExp - F::kMant)
             : std::ldexp(static_cast<float>((1 << F::kMant) + m), e - F::kBias - F::kMant);
  return (b & 0x80) ? -mag : mag;
}

template <class F>
[[nodiscard]] inline uint8_t fp8_encode(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80);
  u &= 0x7FFFFFFFu;
  if (u > 0x7F800000u) return 0;  // NaN
  float a;
  std::memcpy(&a, &u, 4);
  if (a >= F::kMax) return sign | F::kMaxCode;  // also +-inf
  constexpr int kShift = 23 - F::kMant;
  if (a < std::ldexp(1.0f, F::kMinNormalExp)) {
    // Subnormal range (f32 denormals included): count quanta of 2^(emin - M), rounded to
    // nearest even by the 1.5 * 2^23 trick (a / quantum < 2^(M+1) here, so it is exact). A
    // result of 2^M is the smallest normal, whose code is also 2^M.
    const float q = (a * std::ldexp(1.0f, F::kMant - F::kMinNormalExp) + 12582912.0f) - 12582912.0f;
    return sign | static_cast<uint8_t>(q);
  }
  // Normal: round the f32 mantissa to M bits, nearest even; a carry into the exponent is the
  // right result. Then rebias the exponent.
  u += ((1u << (kShift - 1)) - 1) + ((u >> kShift) & 1u);
  const int e = static_cast<int>(u >> 23) - 127;
  int code =
      ((e + F::kBias) << F::kMant) | static_cast<int>((u >> kShift) & ((1u << F::kMant) - 1));
  if (code > F::kMaxCode) code = F::kMaxCode;
  return static_cast<uint8_t>(sign | code);
}

[[nodiscard]] inline uint8_t fp8_e4m3_from_f32(float x) { return fp8_encode<Fp8E4M3>(x); }
[[nodiscard]] inline float fp8_e4m3_to_f32(uint8_t b) { return fp8_decode<Fp8E4M3>(b); }
[[nodiscard]] inline uint8_t fp8_e5m2_from_f32(float x) { return fp8_encode<Fp8E5M2>(x); }
[[nodiscard]] inline float fp8_e5m2_to_f32(uint8_t b) { return fp8_decode<Fp8E5M2>(b); }

}  // namespace kvs
