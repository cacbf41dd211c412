#include "quant/kv_channel_groups.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/half.h"

namespace kvs {
namespace {

constexpr float kF16Max = 65504.0f;

uint16_t load_u16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}
void store_u16(uint8_t* p, uint16_t h) { std::memcpy(p, &h, 2); }

// The next f16 towards -inf (+inf) of a finite f16 h.
uint16_t f16_down(uint16_t h) {
  if (h == 0x0000u || h == 0x8000u) return 0x8001u;  // +-0 -> the negative smallest subnormal
  return (h & 0x8000u) ? static_cast<uint16_t>(h + 1) : static_cast<uint16_t>(h - 1);
}
uint16_t f16_up(uint16_t h) {
  if (h == 0x0000u || h == 0x8000u) return 0x0001u;
  return (h & 0x8000u) ? static_cast<uint16_t>(h - 1) : static_cast<uint16_t>(h + 1);
}
// Largest f16 <= v and smallest f16 >= v, for |v| <= 65504.
uint16_t f16_floor(float v) {
  uint16_t h = f32_to_f16(v);
  if (f16_to_f32(h) > v) h = f16_down(h);
  return h;
}
uint16_t f16_ceil(float v) {
  uint16_t h = f32_to_f16(v);
  if (f16_to_f32(h) < v) h = f16_up(h);
  return h;
}

// x rounded to f16 (NaN -> 0, +-inf and beyond -> +-65504): what a group is sealed from.
float key_value(float x) { return f16_to_f32(channel_key_f16(x)); }

}  // namespace

uint16_t channel_key_f16(float x) {
  if (std::isnan(x)) return 0;
  return f32_to_f16(std::clamp(x, -kF16Max, kF16Max));
}

uint32_t channel_group_bits(KvDtype dtype) {
  return kv_dtype_per_channel(dtype) ? kv_dtype_info(dtype).elem_bits : 0;
}

uint64_t channel_group_bytes(uint32_t bits, uint32_t tokens, uint32_t dim) {
  return 4 * uint64_t{dim} + uint64_t{tokens} * dim * bits / 8;
}

void quantize_channel_group(uint32_t bits, const float* x, uint64_t x_stride, uint32_t n,
                            uint32_t dim, uint8_t* group, uint32_t range_from) {
  KVS_CHECK(bits >= 2 && bits <= 4 && n >= 1 && n <= kMaxChannelGroupTokens && dim % 8 == 0);
  if (range_from >= n) range_from = 0;
  KVS_CHECK(bits != 4 || dim % 32 == 0);
  const uint32_t qmax = (1u << bits) - 1;
  const uint64_t row_bytes = uint64_t{dim} * bits / 8;
  uint8_t* codes = group + 4 * uint64_t{dim};
  std::memset(codes, 0, n * row_bytes);
  for (uint32_t c = 0; c < dim; ++c) {
    float lo = key_value(x[range_from * x_stride + c]), hi = lo;
    for (uint32_t t = range_from + 1; t < n; ++t) {
      const float v = key_value(x[t * x_stride + c]);
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    const uint16_t min16 = f16_floor(lo);
    const float mn = f16_to_f32(min16);
    const uint16_t step16 = f16_ceil(std::min((hi - mn) / static_cast<float>(qmax), kF16Max));
    const float step = f16_to_f32(step16);
    store_u16(group + 2 * c, min16);
    store_u16(group + 2 * (dim + c), step16);
    const float inv = step > 0 ? 1.0f / step : 0.0f;
    for (uint32_t t = 0; t < n; ++t) {
      const float v = key_value(x[t * x_stride + c]);
      const uint32_t q = static_cast<uint32_t>(
          std::clamp(std::nearbyint((v - mn) * inv), 0.0f, static_cast<float>(qmax)));
      uint8_t* row = codes + t * row_bytes;
      if (bits == 4) {  // channel_code's q4_0 order
        row[c / 32 * 16 + c % 16] |= static_cast<uint8_t>(c % 32 < 16 ? q : q << 4);
        continue;
      }
      const uint32_t bit = c * bits;
      row[bit / 8] |= static_cast<uint8_t>(q << (bit % 8));
      if (bit % 8 + bits > 8) row[bit / 8 + 1] |= static_cast<uint8_t>(q >> (8 - bit % 8));
    }
  }
}

void dequantize_channel_row(uint32_t bits, const uint8_t* group, uint32_t t, uint32_t dim,
                            float* y) {
  const uint8_t* row = channel_group_codes(group, bits, t, dim);
  for (uint32_t c = 0; c < dim; ++c) {
    const float mn = f16_to_f32(load_u16(group + 2 * c));
    const float step = f16_to_f32(load_u16(group + 2 * (dim + c)));
    y[c] = mn + step * static_cast<float>(channel_code(row, bits, c));
  }
}

}  // namespace kvs
