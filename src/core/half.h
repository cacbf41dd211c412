// Scalar f16 / bf16 <-> f32 conversions (IEEE binary16, bfloat16). SIMD code converts in
// registers through Highway; these are the reference and the slow path.
#pragma once

#include <cstdint>
#include <cstring>

namespace kvs {

inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t bits_from_f32(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  if (exp == 0) {
    // zero or subnormal: mant * 2^-24
    const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return (sign ? -v : v);
  }
  if (exp == 31) return f32_from_bits(sign | 0x7F800000u | (mant << 13));
  return f32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
}

// Round to nearest even; overflow becomes +-inf, NaN stays NaN.
inline uint16_t f32_to_f16(float f) {
  const uint32_t u = bits_from_f32(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u);   // NaN
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // overflow -> inf
  if (abs < 0x38800000u) {
    // subnormal or zero in f16: value / 2^-24, rounded to nearest even
    const float a = f32_from_bits(abs) * 16777216.0f;  // 2^24
    // a < 1024 here; rint-like rounding to nearest even
    uint32_t q = static_cast<uint32_t>(a);
    const float frac = a - static_cast<float>(q);
    if (frac > 0.5f || (frac == 0.5f && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  const uint32_t mant_round = ((abs >> 13) & 1u) + 0xFFFu;
  const uint32_t r = (abs + mant_round) >> 13;
  return static_cast<uint16_t>(sign | (r - (112u << 10)));
}

inline float bf16_to_f32(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }

inline uint16_t f32_to_bf16(float f) {
  const uint32_t u = bits_from_f32(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN
  const uint32_t rounding = 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

}  // namespace kvs
