#include "quant/kv_channel_groups.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/half.h"
#include "quant/channel_range.h"
#include "quant/f16_rows.h"

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
                            uint32_t dim, uint8_t* group, uint32_t range_from, uint16_t* keys_f16) {
  reseal_channel_group(bits, x, x_stride, n, dim, group, range_from, 0, keys_f16);
}

void reseal_channel_group(uint32_t bits, const float* x, uint64_t x_stride, uint32_t n,
                          uint32_t dim, uint8_t* group, uint32_t range_from, uint32_t sealed,
                          uint16_t* keys_f16) {
  KVS_CHECK(bits >= 2 && bits <= 4 && n >= 1 && n <= kMaxChannelGroupTokens && dim % 8 == 0);
  KVS_CHECK(sealed < n);
  if (range_from >= n) range_from = 0;
  KVS_CHECK(bits != 4 || dim % 32 == 0);
  const uint32_t qmax = (1u << bits) - 1;
  const uint64_t row_bytes = uint64_t{dim} * bits / 8;
  uint8_t* codes = group + 4 * uint64_t{dim};
  std::memset(codes + sealed * row_bytes, 0, (n - sealed) * row_bytes);
  // Channel c's code q of row `row`: OR-ed into zeroed bits, or its bits cleared.
  auto put = [&](uint8_t* row, uint32_t c, uint32_t q) {
    if (bits == 4) {  // channel_code's q4_0 order
      row[c / 32 * 16 + c % 16] |= static_cast<uint8_t>(c % 32 < 16 ? q : q << 4);
      return;
    }
    const uint32_t bit = c * bits;
    row[bit / 8] |= static_cast<uint8_t>(q << (bit % 8));
    if (bit % 8 + bits > 8) row[bit / 8 + 1] |= static_cast<uint8_t>(q >> (8 - bit % 8));
  };
  auto clear = [&](uint8_t* row, uint32_t c) {
    if (bits == 4) {
      row[c / 32 * 16 + c % 16] &= static_cast<uint8_t>(c % 32 < 16 ? 0xF0u : 0x0Fu);
      return;
    }
    const uint32_t bit = c * bits;
    row[bit / 8] &= static_cast<uint8_t>(~(qmax << (bit % 8)));
    if (bit % 8 + bits > 8) row[bit / 8 + 1] &= static_cast<uint8_t>(~(qmax >> (8 - bit % 8)));
  };
  // The rows as they are sealed: the earlier rows are key values already (read in place), the
  // new ones are rounded once here, each element as f16_to_f32(channel_key_f16(x)): NaN -> 0 and
  // the clamp, then a row at a time through the f16 rows' SIMD conversions (the scalar routines'
  // bits). Each channel's range, rows in order (so a signed zero ends as before).
  thread_local std::vector<float> fresh, lows, highs;
  thread_local std::vector<uint16_t> halves;
  thread_local std::vector<const float*> rows;
  fresh.resize(uint64_t{n - sealed} * dim);
  halves.resize(uint64_t{n - sealed} * dim);
  lows.resize(dim);
  highs.resize(dim);
  rows.resize(n);
  uint16_t* const h16 = keys_f16 != nullptr ? keys_f16 : halves.data();
  for (uint32_t t = 0; t < n; ++t) {
    if (t < sealed) {
      rows[t] = x + t * x_stride;
      continue;
    }
    float* k = fresh.data() + uint64_t{t - sealed} * dim;
    uint16_t* h = h16 + uint64_t{t - sealed} * dim;
    for (uint32_t c = 0; c < dim; ++c) {
      const float v = x[t * x_stride + c];
      k[c] = std::isnan(v) ? 0.0f : std::clamp(v, -kF16Max, kF16Max);
    }
    f16_from_f32_rows(k, dim, h);
    f32_from_f16_rows(h, dim, k);
    rows[t] = k;
  }
  channel_range(rows.data() + range_from, n - range_from, dim, lows.data(), highs.data());
  for (uint32_t c = 0; c < dim; ++c) {
    const float lo = lows[c], hi = highs[c];
    const uint16_t min16 = f16_floor(lo);
    const float mn = f16_to_f32(min16);
    const uint16_t step16 = f16_ceil(std::min((hi - mn) / static_cast<float>(qmax), kF16Max));
    const float step = f16_to_f32(step16);
    // The earlier rows' codes stand where the channel's minimum and step did not move: they are
    // a function of those and of the rows' values only.
    uint32_t from = sealed;
    if (sealed > 0 &&
        (load_u16(group + 2 * c) != min16 || load_u16(group + 2 * (dim + c)) != step16)) {
      for (uint32_t t = 0; t < sealed; ++t) clear(codes + t * row_bytes, c);
      from = 0;
    }
    store_u16(group + 2 * c, min16);
    store_u16(group + 2 * (dim + c), step16);
    const float inv = step > 0 ? 1.0f / step : 0.0f;
    for (uint32_t t = from; t < n; ++t) {
      const float v = rows[t][c];
      // Nearest, ties to even, as std::nearbyint rounds in the default mode, without a libm call:
      // adding and taking 1.5 x 2^23 leaves no fraction bits for |u| < 2^22, and beyond that
      // both land outside [0, qmax] on the same side, which the clamp settles alike.
      const float u = (v - mn) * inv;
      const float r = (u + 12582912.0f) - 12582912.0f;
      const uint32_t q = static_cast<uint32_t>(std::clamp(r, 0.0f, static_cast<float>(qmax)));
      put(codes + t * row_bytes, c, q);
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
