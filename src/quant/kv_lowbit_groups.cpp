#include "quant/kv_lowbit_groups.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/half.h"
#include "quant/kv_codecs.h"

namespace kvs {
namespace {

constexpr float kF16Max = 65504.0f;
constexpr float kF32Max = 3.4028235e38f;

float stored_f16(float v) { return f16_to_f32(f32_to_f16(v)); }

// The smallest f16 >= v (v >= 0 and finite), so that a scale rounded to f16 still reaches amax.
float f16_at_least(float v) {
  uint16_t h = f32_to_f16(v);
  if (f16_to_f32(h) < v && h < 0x7BFF) ++h;  // positive f16 bit patterns grow with the value
  return f16_to_f32(h);
}

// Codes of the group for scale d; returns the squared error and sets *worst to the largest
// element error.
double lowbit_codes(uint32_t bits, const float* x, float d, uint8_t* c, float* worst) {
  const int top = (1 << bits) - 1;
  const float inv = d > 0 ? 0.5f / d : 0.0f;
  double err = 0;
  float w = 0;
  for (uint32_t i = 0; i < kLowBitGroup; ++i) {
    // The nearest level d (2c - top): c = round((x / d + top) / 2), clamped.
    const float q = std::clamp(std::floor(x[i] * inv + 0.5f * float(top + 1)), 0.0f, float(top));
    c[i] = static_cast<uint8_t>(q);
    const float e = x[i] - d * (2.0f * q - float(top));
    err += double(e) * e;
    w = std::max(w, std::fabs(e));
  }
  *worst = w;
  return err;
}

void pack(uint32_t bits, const uint8_t* c, uint8_t* dst) {
  uint64_t low = 0;
  uint32_t high = 0;
  for (uint32_t i = 0; i < kLowBitGroup; ++i) {
    low |= uint64_t{c[i] & 3u} << (2 * i);
    high |= uint32_t{(c[i] >> 2) & 1u} << i;
  }
  std::memcpy(dst + 2, &low, 8);
  if (bits == 3) std::memcpy(dst + 10, &high, 4);
}

}  // namespace

uint32_t lowbit_code(uint32_t bits, const uint8_t* group, uint32_t i) {
  uint64_t low;
  std::memcpy(&low, group + 2, 8);
  uint32_t c = static_cast<uint32_t>(low >> (2 * i)) & 3u;
  if (bits == 3) {
    uint32_t high;
    std::memcpy(&high, group + 10, 4);
    c |= ((high >> i) & 1u) << 2;
  }
  return c;
}

void quantize_lowbit(uint32_t bits, const float* xs, uint32_t n, uint8_t* dst) {
  KVS_CHECK(bits == 2 || bits == 3);
  KVS_CHECK(n % kLowBitGroup == 0);
  const int top = (1 << bits) - 1;
  const float kFactors[] = {1.0f, 0.95f, 0.9f, 0.85f, 0.8f, 0.75f, 0.7f, 0.65f, 0.6f, 0.55f};
  float x[kLowBitGroup];
  for (uint32_t g = 0; g < n / kLowBitGroup; ++g, xs += kLowBitGroup) {
    float amax = 0;
    for (uint32_t i = 0; i < kLowBitGroup; ++i) {
      x[i] = std::isnan(xs[i]) ? 0.0f : std::clamp(xs[i], -kF32Max, kF32Max);
      amax = std::max(amax, std::fabs(x[i]));
    }
    const float limit = amax / float(1 << (bits - 1));
    double best = INFINITY;
    bool have = false;
    float best_d = 0;
    uint8_t best_c[kLowBitGroup] = {};
    uint8_t c[kLowBitGroup];
    auto consider = [&](float d) {
      d = stored_f16(std::clamp(d, 0.0f, kF16Max));
      float worst;
      const double err = lowbit_codes(bits, x, d, c, &worst);
      if (!have || (err < best && worst <= limit)) {
        have = true;
        best = err;
        best_d = d;
        std::memcpy(best_c, c, kLowBitGroup);
      }
    };
    for (float f : kFactors) {
      // f = 1 rounded up, so that it reaches amax (no clipping) after the f16 rounding.
      consider(f == 1.0f ? f16_at_least(std::min(amax / float(top), kF16Max))
                         : f * amax / float(top));
      double xl = 0, ll = 0;  // refit: d* = sum(x l) / sum(l^2), l = 2c - top
      for (uint32_t i = 0; i < kLowBitGroup; ++i) {
        const double l = 2.0 * c[i] - top;
        xl += double(x[i]) * l;
        ll += l * l;
      }
      if (ll > 0 && std::isfinite(xl) && xl > 0) consider(static_cast<float>(xl / ll));
    }
    const uint16_t h = f32_to_f16(best_d);
    std::memcpy(dst, &h, 2);
    pack(bits, best_c, dst);
    dst += lowbit_group_bytes(bits);
  }
}

void dequantize_lowbit(uint32_t bits, const uint8_t* src, uint32_t n, float* y) {
  const int top = (1 << bits) - 1;
  for (uint32_t g = 0; g < n / kLowBitGroup; ++g, src += lowbit_group_bytes(bits)) {
    const float d = load_f16_scale(src);
    for (uint32_t i = 0; i < kLowBitGroup; ++i)
      *y++ = d * float(2 * int(lowbit_code(bits, src, i)) - top);
  }
}

}  // namespace kvs
