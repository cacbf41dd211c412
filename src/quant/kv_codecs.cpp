#include "quant/kv_codecs.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>

#include "core/half.h"
#include "core/round_even.h"
#include "quant/fp8.h"
#include "quant/scale_fits.h"

namespace kvs {
namespace {

constexpr float kF16Max = 65504.0f;

void store_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

// Largest finite |x| (NaN skipped, inf counts as the largest f32 so that scales saturate).
float abs_max(const float* x, uint32_t n) {
  float m = 0.0f;
  for (uint32_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (a > m) m = std::isinf(a) ? 3.4028235e38f : a;  // NaN compares false: skipped
  }
  return m;
}

// The f16 scale actually stored for amax / qmax, and the f32 value it decodes to.
float stored_scale(float amax, float qmax, uint8_t* p) {
  const float s = std::min(amax / qmax, kF16Max);
  store_f16(p, s);
  return load_f16_scale(p);
}

// round(x * inv) clamped to [-qmax, qmax] (inv = 1 / s); NaN -> 0, +-inf -> +-qmax.
inline int quantize_symmetric(float x, float inv, int qmax) {
  const float v = x * inv;
  if (!(v == v)) return 0;  // NaN (also 0 * inf)
  return static_cast<int>(round_even(std::clamp(v, -float(qmax), float(qmax))));
}

// x with NaN -> 0 and +-inf -> +-largest finite (the quantizers' contract).
void sanitize(const float* x, uint32_t n, float* y) {
  for (uint32_t i = 0; i < n; ++i)
    y[i] = std::isnan(x[i]) ? 0.0f : std::clamp(x[i], -3.4028235e38f, 3.4028235e38f);
}

void pack_q4(const uint8_t* n, uint8_t* dst) {
  for (uint32_t j = 0; j < 16; ++j) dst[2 + j] = static_cast<uint8_t>(n[j] | (n[j + 16] << 4));
}

// Signed element of largest magnitude (NaN skipped, inf clamped to the largest f32).
float signed_abs_max(const float* x, uint32_t n) {
  float m = 0.0f, am = 0.0f;
  for (uint32_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (a > am) {
      am = std::isinf(a) ? 3.4028235e38f : a;
      m = std::signbit(x[i]) ? -am : am;
    }
  }
  return m;
}

}  // namespace

float load_f16_scale(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

void quantize_fp8_e4m3(const float* x, uint32_t n, uint8_t* dst) {
  for (uint32_t i = 0; i < n; ++i) dst[i] = fp8_e4m3_from_f32(x[i]);
}
void quantize_fp8_e5m2(const float* x, uint32_t n, uint8_t* dst) {
  for (uint32_t i = 0; i < n; ++i) dst[i] = fp8_e5m2_from_f32(x[i]);
}
void dequantize_fp8_e4m3(const uint8_t* src, uint32_t n, float* y) {
  for (uint32_t i = 0; i < n; ++i) y[i] = fp8_e4m3_to_f32(src[i]);
}
void dequantize_fp8_e5m2(const uint8_t* src, uint32_t n, float* y) {
  for (uint32_t i = 0; i < n; ++i) y[i] = fp8_e5m2_to_f32(src[i]);
}

void quantize_fp8_e4m3_dyn(const float* x, uint32_t n, uint8_t* dst) {
  const float s = stored_scale(abs_max(x, n), Fp8DynTraits::kQMax, dst + n);
  const float inv = s == 0.0f ? 0.0f : 1.0f / s;
  for (uint32_t i = 0; i < n; ++i) dst[i] = s == 0.0f ? 0 : fp8_e4m3_from_f32(x[i] * inv);
}
void dequantize_fp8_e4m3_dyn(const uint8_t* src, uint32_t n, float* y) {
  const float s = load_f16_scale(src + n);
  for (uint32_t i = 0; i < n; ++i) y[i] = s * fp8_e4m3_to_f32(src[i]);
}

void quantize_int8(const float* x, uint32_t n, uint8_t* dst) {
  const float s = stored_scale(abs_max(x, n), Int8Traits::kQMax, dst + n);
  const float inv = s == 0.0f ? 0.0f : 1.0f / s;
  for (uint32_t i = 0; i < n; ++i)
    dst[i] = static_cast<uint8_t>(static_cast<int8_t>(quantize_symmetric(x[i], inv, 127)));
}
void dequantize_int8(const uint8_t* src, uint32_t n, float* y) {
  const float s = load_f16_scale(src + n);
  for (uint32_t i = 0; i < n; ++i) y[i] = s * static_cast<float>(static_cast<int8_t>(src[i]));
}

void quantize_q4_0(const float* xs, uint32_t n, uint8_t* dst) {
  constexpr uint32_t G = GroupQ4Traits::kGroup;
  float x[G];
  for (uint32_t g = 0; g < n / G; ++g, xs += G, dst += GroupQ4Traits::kGroupBytes) {
    sanitize(xs, G, x);
    const float m = signed_abs_max(x, G);
    store_f16(dst, std::clamp(m / -8.0f, -kF16Max, kF16Max));
    uint8_t lv[G];
    scale_level_codes(ScaleLevels::kInt4, x, load_f16_scale(dst), lv);
    pack_q4(lv, dst);
  }
}

void quantize_int4(const float* x, uint32_t n, uint8_t* dst) {
  quantize_int4_with(x, n, dst, scale_fits_scalar);
}

void quantize_int4_with(const float* xs, uint32_t n, uint8_t* dst, ScaleFitsFn fits) {
  constexpr uint32_t G = GroupQ4Traits::kGroup;
  static_assert(G == kScaleFitGroup);
  // Candidates: the extreme element m lands on level c (d = m / c carries m's sign, so both
  // signs are covered). c = -8 is q4_0's choice; |c| < 8 widens the far side, |c| > 8 clips m
  // for finer steps. Each candidate is followed by one least-squares refit of d for its
  // levels. The group keeps the (d, levels) of smallest squared error among those whose
  // largest element error is <= amax / 4, so it is never worse than q4_0's choice (candidate
  // c = -8, tried first, whose largest error is amax / 8).
  static constexpr float kCandidates[] = {-8.0f, -9.0f,  -8.75f, -8.5f,  -8.25f, -7.75f,
                                          -7.5f, -7.25f, -7.0f,  -6.75f, -6.5f};
  constexpr uint32_t K = std::size(kCandidates);
  static_assert(K <= kMaxScaleFits);
  float x[G];
  for (uint32_t g = 0; g < n / G; ++g, xs += G, dst += GroupQ4Traits::kGroupBytes) {
    sanitize(xs, G, x);
    const float m = signed_abs_max(x, G);
    float d[K];  // as stored in f16
    for (uint32_t c = 0; c < K; ++c)
      d[c] = f16_to_f32(f32_to_f16(std::clamp(m / kCandidates[c], -kF16Max, kF16Max)));
    const float best_d = search_scale(ScaleLevels::kInt4, x, d, K, std::fabs(m) / 4, fits);
    store_f16(dst, best_d);
    uint8_t lv[G];
    scale_level_codes(ScaleLevels::kInt4, x, best_d, lv);
    pack_q4(lv, dst);
  }
}

void dequantize_q4(const uint8_t* src, uint32_t n, float* y) {
  constexpr uint32_t G = GroupQ4Traits::kGroup;
  for (uint32_t g = 0; g < n / G; ++g, src += GroupQ4Traits::kGroupBytes, y += G) {
    const float d = load_f16_scale(src);
    for (uint32_t j = 0; j < 16; ++j) {
      y[j] = d * static_cast<float>((src[2 + j] & 0x0F) - 8);
      y[j + 16] = d * static_cast<float>((src[2 + j] >> 4) - 8);
    }
  }
}

void quantize_q8_0(const float* x, uint32_t n, uint8_t* dst) {
  constexpr uint32_t G = GroupQ8Traits::kGroup;
  for (uint32_t g = 0; g < n / G; ++g, x += G, dst += GroupQ8Traits::kGroupBytes) {
    const float d = stored_scale(abs_max(x, G), 127.0f, dst);
    const float inv = d == 0.0f ? 0.0f : 1.0f / d;
    for (uint32_t i = 0; i < G; ++i)
      dst[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(quantize_symmetric(x[i], inv, 127)));
  }
}

void dequantize_q8_0(const uint8_t* src, uint32_t n, float* y) {
  constexpr uint32_t G = GroupQ8Traits::kGroup;
  for (uint32_t g = 0; g < n / G; ++g, src += GroupQ8Traits::kGroupBytes, y += G) {
    const float d = load_f16_scale(src);
    for (uint32_t i = 0; i < G; ++i) y[i] = d * static_cast<float>(static_cast<int8_t>(src[2 + i]));
  }
}

}  // namespace kvs
