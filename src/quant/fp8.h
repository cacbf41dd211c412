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
  if (std::isnan(x)) return 0;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const float a = std::fabs(x);
  if (a >= F::kMax) return sign | F::kMaxCode;
  if (a == 0.0f) return sign;
  int e2;
  std::frexp(a, &e2);  // a = f * 2^e2, f in [0.5, 1): floor(log2 a) = e2 - 1
  const int e = std::max(e2 - 1, F::kMinNormalExp);
  // Quantum of the binade (or of the subnormal range): 2^(e - M). q counts quanta, rounded to
  // nearest even; for normals q is in [2^M, 2^(M+1)], and q == 2^(M+1) carries into the next
  // exponent by plain addition below (as does a subnormal rounding up to the smallest normal).
  const float q = std::nearbyint(std::ldexp(a, F::kMant - e));
  const int qi = static_cast<int>(q);
  int code;
  if (e2 - 1 < F::kMinNormalExp)
    code = qi;  // subnormal (or rounds up to the smallest normal, code 1 << M)
  else
    code = ((e + F::kBias) << F::kMant) + (qi - (1 << F::kMant));
  if (code > F::kMaxCode) code = F::kMaxCode;
  return static_cast<uint8_t>(sign | code);
}

[[nodiscard]] inline uint8_t fp8_e4m3_from_f32(float x) { return fp8_encode<Fp8E4M3>(x); }
[[nodiscard]] inline float fp8_e4m3_to_f32(uint8_t b) { return fp8_decode<Fp8E4M3>(b); }
[[nodiscard]] inline uint8_t fp8_e5m2_from_f32(float x) { return fp8_encode<Fp8E5M2>(x); }
[[nodiscard]] inline float fp8_e5m2_to_f32(uint8_t b) { return fp8_decode<Fp8E5M2>(b); }

}  // namespace kvs
