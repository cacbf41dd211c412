#include "quant/kv_lowbit_groups.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>

#include "core/check.h"
#include "core/half.h"
#include "quant/kv_codecs.h"
#include "quant/scale_fits.h"

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

// The planes of `elems` codes after the group's scale: a 64-bit word of 2-bit codes per 32
// elements, then (3 bits, 32 elements) the high bits.
void pack(uint32_t bits, const uint8_t* c, uint32_t elems, uint8_t* dst) {
  for (uint32_t w = 0; w < elems / 32; ++w) {
    uint64_t low = 0;
    for (uint32_t i = 0; i < 32; ++i) low |= uint64_t{c[32 * w + i] & 3u} << (2 * i);
    std::memcpy(dst + 2 + 8 * w, &low, 8);
  }
  if (bits == 3) {
    uint32_t high = 0;
    for (uint32_t i = 0; i < kLowBitGroup; ++i) high |= uint32_t{(c[i] >> 2) & 1u} << i;
    std::memcpy(dst + 10, &high, 4);
  }
}

}  // namespace

uint32_t lowbit_code(uint32_t bits, const uint8_t* group, uint32_t i) {
  uint64_t low;
  std::memcpy(&low, group + 2 + 8 * (i / 32), 8);
  uint32_t c = static_cast<uint32_t>(low >> (2 * (i % 32))) & 3u;
  if (bits == 3) {
    uint32_t high;
    std::memcpy(&high, group + 10, 4);
    c |= ((high >> i) & 1u) << 2;
  }
  return c;
}

void quantize_lowbit(uint32_t bits, const float* x, uint32_t n, uint8_t* dst, uint32_t elems) {
  quantize_lowbit_with(bits, x, n, dst, scale_fits_scalar, elems);
}

void quantize_lowbit_with(uint32_t bits, const float* xs, uint32_t n, uint8_t* dst,
                          ScaleFitsFn fits, uint32_t elems) {
  KVS_CHECK(bits == 2 || bits == 3);
  KVS_CHECK(elems == kLowBitGroup || (elems == kLowBitGroup64 && bits == 2));
  KVS_CHECK(n % elems == 0);
  static_assert(kLowBitGroup == kScaleFitGroup);
  const ScaleLevels levels = bits == 3 ? ScaleLevels::kLowBit3 : ScaleLevels::kLowBit2;
  const int top = (1 << bits) - 1;
  static constexpr float kFactors[] = {1.0f,  0.95f, 0.9f,  0.85f, 0.8f,
                                       0.75f, 0.7f,  0.65f, 0.6f,  0.55f};
  constexpr uint32_t K = std::size(kFactors);
  static_assert(K <= kMaxScaleFits);
  float x[kLowBitGroup64];
  for (uint32_t g = 0; g < n / elems; ++g, xs += elems) {
    float amax = 0;
    for (uint32_t i = 0; i < elems; ++i) {
      x[i] = std::isnan(xs[i]) ? 0.0f : std::clamp(xs[i], -kF32Max, kF32Max);
      amax = std::max(amax, std::fabs(x[i]));
    }
    float d[K];  // as stored in f16; f = 1 rounded up, so that it reaches amax after the f16
    for (uint32_t c = 0; c < K; ++c)
      d[c] = stored_f16(std::clamp(kFactors[c] == 1.0f
                                       ? f16_at_least(std::min(amax / float(top), kF16Max))
                                       : kFactors[c] * amax / float(top),
                                   0.0f, kF16Max));
    const float best_d =
        search_scale(levels, x, d, K, amax / float(1 << (bits - 1)), fits, elems / kScaleFitGroup);
    const uint16_t h = f32_to_f16(best_d);
    std::memcpy(dst, &h, 2);
    uint8_t c[kLowBitGroup64];
    for (uint32_t part = 0; part < elems; part += kScaleFitGroup)
      scale_level_codes(levels, x + part, best_d, c + part);
    pack(bits, c, elems, dst);
    dst += lowbit_group_bytes(bits, elems);
  }
}

void dequantize_lowbit(uint32_t bits, const uint8_t* src, uint32_t n, float* y, uint32_t elems) {
  const int top = (1 << bits) - 1;
  for (uint32_t g = 0; g < n / elems; ++g, src += lowbit_group_bytes(bits, elems)) {
    const float d = load_f16_scale(src);
    for (uint32_t i = 0; i < elems; ++i) *y++ = d * float(2 * int(lowbit_code(bits, src, i)) - top);
  }
}

}  // namespace kvs
