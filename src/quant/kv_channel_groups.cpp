#include "quant/kv_channel_groups.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/half.h"
#include "quant/channel_codes.h"
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

// A row's codes (one byte each) in channel_code's layout: q4_0's nibble order for 4 bits, LSB
// first otherwise (dim % 8 == 0, so a row ends on a byte).
void pack_channel_row(uint32_t bits, const uint8_t* q, uint32_t dim, uint8_t* row) {
  if (bits == 4) {
    for (uint32_t b = 0; b < dim; b += 32)
      for (uint32_t j = 0; j < 16; ++j)
        row[b / 2 + j] = static_cast<uint8_t>(q[b + j] | (q[b + j + 16] << 4));
    return;
  }
  uint32_t acc = 0, have = 0;
  for (uint32_t c = 0; c < dim; ++c) {
    acc |= uint32_t{q[c]} << have;
    for (have += bits; have >= 8; have -= 8, acc >>= 8) *row++ = static_cast<uint8_t>(acc);
  }
}

// Channel c's code of a row set to q, the row's other codes kept.
void put_channel_code(uint32_t bits, uint8_t* row, uint32_t c, uint32_t q) {
  if (bits == 4) {  // channel_code's q4_0 order
    uint8_t& byte = row[c / 32 * 16 + c % 16];
    byte = static_cast<uint8_t>(c % 32 < 16 ? (byte & 0xF0u) | q : (byte & 0x0Fu) | (q << 4));
    return;
  }
  const uint32_t mask = (1u << bits) - 1, bit = c * bits;
  row[bit / 8] = static_cast<uint8_t>((row[bit / 8] & ~(mask << (bit % 8))) | (q << (bit % 8)));
  if (bit % 8 + bits > 8) {
    const uint32_t shift = 8 - bit % 8;
    row[bit / 8 + 1] = static_cast<uint8_t>((row[bit / 8 + 1] & ~(mask >> shift)) | (q >> shift));
  }
}

}  // namespace

uint16_t channel_key_f16(float x) {
  if (std::isnan(x)) return 0;
  return f32_to_f16(std::clamp(x, -kF16Max, kF16Max));
}

uint32_t channel_group_bits(KvDtype dtype) {
  return kv_dtype_per_channel(dtype) ? kv_dtype_info(dtype).elem_bits : 0;
}

ChannelBits channel_bits(KvDtype dtype) {
  return {channel_group_bits(dtype), kv_dtype_wide_channels(dtype)};
}

uint64_t channel_group_bytes(ChannelBits code, uint32_t tokens, uint32_t dim) {
  return 4 * uint64_t{dim} + uint64_t{tokens} * dim * code.bits / 8 +
         (code.wide ? uint64_t{tokens} * dim / 32 : 0);
}

void quantize_channel_group(ChannelBits code, const float* x, uint64_t x_stride, uint32_t n,
                            uint32_t dim, uint8_t* group, uint32_t range_from, uint16_t* keys_f16) {
  reseal_channel_group(code, nullptr, x, x_stride, n, dim, group, range_from, 0, keys_f16);
}

namespace {

// An int2mix_chan64 group sealed over all of its rows [0, n) (f32 values of f16 keys): the ranges
// over rows [range_from, n), the quarter of the channels of widest range at 3 bits, every row
// coded. Rows [0, sealed) were sealed by the group's present bytes, from these very keys: where
// the new rows leave the wide channels as they were, an earlier row's code changes only in the
// channels whose minimum or step moved, so only those are coded again (the same bytes as coding
// every row).
void seal_wide_group(const float* const* rows, uint32_t n, uint32_t dim, uint8_t* group,
                     uint32_t range_from, uint32_t sealed) {
  thread_local std::vector<float> lows, highs, minimums, inverse_steps;
  thread_local std::vector<uint32_t> order, moved;
  thread_local std::vector<uint8_t> wide, row_codes, low;
  thread_local std::vector<uint16_t> mins16, steps16;
  lows.resize(dim);
  highs.resize(dim);
  channel_range(rows + range_from, n - range_from, dim, lows.data(), highs.data());
  order.resize(dim);
  for (uint32_t c = 0; c < dim; ++c) order[c] = c;
  // The dim / 4 widest channels, ties to the lower channel: a total order, so selecting them is
  // the same set as sorting (a decode step seals a group per layer and kv head).
  std::nth_element(order.begin(), order.begin() + (dim / 4 - 1), order.end(),
                   [&](uint32_t a, uint32_t b) {
                     const float wa = highs[a] - lows[a], wb = highs[b] - lows[b];
                     return wa > wb || (wa == wb && a < b);
                   });
  wide.assign(dim, 0);
  for (uint32_t i = 0; i < dim / 4; ++i) wide[order[i]] = 1;
  minimums.resize(dim);
  inverse_steps.resize(dim);
  mins16.resize(dim);
  steps16.resize(dim);
  for (uint32_t c = 0; c < dim; ++c) {
    const uint16_t min16 = f16_floor(lows[c]);
    const float mn = f16_to_f32(min16);
    const uint16_t step16 = f16_ceil(std::min((highs[c] - mn) / (wide[c] ? 7.0f : 3.0f), kF16Max));
    mins16[c] = min16;
    steps16[c] = static_cast<uint16_t>(step16 | (wide[c] ? 0x8000u : 0u));
    minimums[c] = mn;
    const float step = f16_to_f32(step16);
    inverse_steps[c] = step > 0 ? 1.0f / step : 0.0f;
  }
  // The earlier rows keep their codes where the wide channels are the same ones.
  bool keep = sealed > 0;
  for (uint32_t c = 0; keep && c < dim; ++c)
    keep = channel_step_wide(load_u16(group + 2 * (dim + c))) == (wide[c] != 0);
  moved.clear();
  if (keep)
    for (uint32_t c = 0; c < dim; ++c)
      if (load_u16(group + 2 * c) != mins16[c] || load_u16(group + 2 * (dim + c)) != steps16[c])
        moved.push_back(c);
  for (uint32_t c = 0; c < dim; ++c) {
    store_u16(group + 2 * c, mins16[c]);
    store_u16(group + 2 * (dim + c), steps16[c]);
  }
  uint8_t* const codes = group + 4 * uint64_t{dim};  // 2 bits per channel, dim / 4 bytes a row
  if (keep && !moved.empty()) {
    // Each moved channel's place: its 2 bits in the row, its bit in the wide plane (wide
    // channels numbered in channel order).
    thread_local std::vector<uint32_t> wide_index;
    wide_index.resize(dim);
    for (uint32_t c = 0, k = 0; c < dim; ++c) wide_index[c] = wide[c] ? k++ : 0;
    for (uint32_t t = 0; t < sealed; ++t) {
      uint8_t* row = codes + uint64_t{t} * dim / 4;
      uint8_t* third = group + (channel_group_wide_bits(group, t, dim) - group);
      for (const uint32_t c : moved) {
        const uint32_t q = channel_code_of(rows[t][c], minimums[c], inverse_steps[c], 7);
        const uint32_t v = wide[c] ? q : std::min<uint32_t>(q, 3);
        const uint32_t shift = 2 * (c % 4);
        row[c / 4] = static_cast<uint8_t>((row[c / 4] & ~(3u << shift)) | ((v & 3u) << shift));
        if (wide[c]) {
          const uint32_t k = wide_index[c];
          third[k / 8] =
              static_cast<uint8_t>((third[k / 8] & ~(1u << (k % 8))) | ((v >> 2) << (k % 8)));
        }
      }
    }
  }
  const uint32_t first = keep ? sealed : 0;  // the rows coded whole
  row_codes.resize(uint64_t{n - first} * dim);
  channel_codes(rows + first, n - first, dim, minimums.data(), inverse_steps.data(), 7,
                row_codes.data());
  low.resize(dim);
  for (uint32_t t = first; t < n; ++t) {
    const uint8_t* q = row_codes.data() + uint64_t{t - first} * dim;
    uint8_t* third = group + (channel_group_wide_bits(group, t, dim) - group);
    std::fill_n(third, dim / 32, uint8_t{0});
    uint32_t k = 0;
    for (uint32_t c = 0; c < dim; ++c) {
      const uint32_t v = wide[c] ? q[c] : std::min<uint32_t>(q[c], 3);
      low[c] = static_cast<uint8_t>(v & 3u);
      if (wide[c]) {
        third[k / 8] = static_cast<uint8_t>(third[k / 8] | ((v >> 2) << (k % 8)));
        ++k;
      }
    }
    pack_channel_row(2, low.data(), dim, codes + uint64_t{t} * dim / 4);
  }
}

}  // namespace

void reseal_channel_group(ChannelBits code, const uint16_t* earlier, const float* x,
                          uint64_t x_stride, uint32_t n, uint32_t dim, uint8_t* group,
                          uint32_t range_from, uint32_t sealed, uint16_t* keys_f16) {
  const uint32_t bits = code.bits;
  KVS_CHECK(bits >= 2 && bits <= 4 && n >= 1 && n <= kMaxChannelGroupTokens && dim % 8 == 0);
  KVS_CHECK(!code.wide || (bits == 2 && dim % 32 == 0));
  KVS_CHECK(sealed < n && (sealed == 0 || earlier != nullptr));
  if (range_from >= n) range_from = 0;
  KVS_CHECK(bits != 4 || dim % 32 == 0);
  const uint32_t qmax = (1u << bits) - 1;
  const uint64_t row_bytes = uint64_t{dim} * bits / 8;
  uint8_t* codes = group + 4 * uint64_t{dim};
  // The group's parameters and earlier codes are read below, after the rows are rounded and the
  // range taken: in a batch's decode step they have left the caches since the last step.
  for (uint64_t o = 0; o < 4 * uint64_t{dim} + n * row_bytes; o += 64)
    __builtin_prefetch(group + o, 1);
  // The new rows, rounded once here, each element as f16_to_f32(channel_key_f16(x)): NaN -> 0
  // and the clamp, then a row at a time through the f16 rows' SIMD conversions (the scalar
  // routines' bits). The earlier rows are f16 keys already, read in place.
  thread_local std::vector<float> fresh, earlier_rows, lows, highs, earlier_range, minimums,
      inverse_steps;
  thread_local std::vector<uint16_t> halves;
  thread_local std::vector<const float*> rows;
  thread_local std::vector<uint8_t> row_codes;
  thread_local std::vector<uint32_t> recode;
  fresh.resize(uint64_t{n - sealed} * dim);
  halves.resize(uint64_t{n - sealed} * dim);
  rows.assign(n, nullptr);
  uint16_t* const h16 = keys_f16 != nullptr ? keys_f16 : halves.data();
  for (uint32_t t = sealed; t < n; ++t) {
    float* k = fresh.data() + uint64_t{t - sealed} * dim;
    uint16_t* h = h16 + uint64_t{t - sealed} * dim;
    const float* v = x + (t - sealed) * x_stride;
    for (uint32_t c = 0; c < dim; ++c)
      k[c] = std::isnan(v[c]) ? 0.0f : std::clamp(v[c], -kF16Max, kF16Max);
    f16_from_f32_rows(k, dim, h);
    f32_from_f16_rows(h, dim, k);
    rows[t] = k;
  }
  if (code.wide) {  // every row coded again, the earlier ones from their f16 keys
    earlier_rows.resize(uint64_t{sealed} * dim);
    if (sealed > 0) f32_from_f16_rows(earlier, uint64_t{sealed} * dim, earlier_rows.data());
    for (uint32_t t = 0; t < sealed; ++t) rows[t] = earlier_rows.data() + uint64_t{t} * dim;
    seal_wide_group(rows.data(), n, dim, group, range_from, sealed);
    return;
  }
  // Each channel's range, rows in order (so a signed zero ends as before). Over an earlier seal
  // whose range took rows [range_from, sealed), that range (taken on the f16 rows) is continued
  // with the new rows: a channel whose range they leave as it was keeps its minimum and step (a
  // function of the range) and its earlier rows' codes, so only the others are looked at.
  lows.resize(dim);
  highs.resize(dim);
  const bool continued = sealed > range_from;
  if (continued) {
    channel_range_f16(earlier + uint64_t{range_from} * dim, sealed - range_from, dim, lows.data(),
                      highs.data());
    earlier_range.assign(lows.begin(), lows.end());
    earlier_range.insert(earlier_range.end(), highs.begin(), highs.end());
    channel_range_extend(rows.data() + sealed, n - sealed, dim, lows.data(), highs.data());
  } else {  // sealed <= range_from: the range is over new rows only
    channel_range(rows.data() + range_from, n - range_from, dim, lows.data(), highs.data());
  }
  recode.clear();  // the channels whose earlier rows are coded again
  for (uint32_t c = 0; c < dim; ++c) {
    const float lo = lows[c], hi = highs[c];
    if (continued && std::memcmp(&lo, &earlier_range[c], 4) == 0 &&
        std::memcmp(&hi, &earlier_range[dim + c], 4) == 0)
      continue;
    const uint16_t min16 = f16_floor(lo);
    const float mn = f16_to_f32(min16);
    const uint16_t step16 = f16_ceil(std::min((hi - mn) / static_cast<float>(qmax), kF16Max));
    // The earlier rows' codes stand where the channel's minimum and step did not move: they are
    // a function of those and of the rows' values only.
    if (sealed > 0 &&
        (load_u16(group + 2 * c) != min16 || load_u16(group + 2 * (dim + c)) != step16))
      recode.push_back(c);
    store_u16(group + 2 * c, min16);
    store_u16(group + 2 * (dim + c), step16);
  }
  // Every channel's minimum and 1 / step as a reader decodes them, then the codes: the new rows'
  // (or every row's, when many channels moved) in SIMD lanes, whole rows packed at once, and the
  // few moved channels of the earlier rows one code at a time.
  minimums.resize(dim);
  inverse_steps.resize(dim);
  f32_from_f16_rows(channel_group_minimums(group), dim, minimums.data());
  f32_from_f16_rows(channel_group_steps(group, dim), dim, inverse_steps.data());
  for (float& v : inverse_steps) v = v > 0 ? 1.0f / v : 0.0f;
  const uint32_t first = recode.size() * 8 > dim ? 0 : sealed;
  if (first < sealed) {  // the earlier rows as f32, for the lanes
    earlier_rows.resize(uint64_t{sealed} * dim);
    f32_from_f16_rows(earlier, uint64_t{sealed} * dim, earlier_rows.data());
    for (uint32_t t = 0; t < sealed; ++t) rows[t] = earlier_rows.data() + uint64_t{t} * dim;
  }
  row_codes.resize(uint64_t{n - first} * dim);
  channel_codes(rows.data() + first, n - first, dim, minimums.data(), inverse_steps.data(), qmax,
                row_codes.data());
  for (uint32_t t = first; t < n; ++t)
    pack_channel_row(bits, row_codes.data() + uint64_t{t - first} * dim, dim,
                     codes + t * row_bytes);
  if (first == 0) return;
  for (const uint32_t c : recode)
    for (uint32_t t = 0; t < sealed; ++t)
      put_channel_code(bits, codes + t * row_bytes, c,
                       channel_code_of(f16_to_f32(earlier[uint64_t{t} * dim + c]), minimums[c],
                                       inverse_steps[c], qmax));
}

void channel_row_codes(ChannelBits code, const uint8_t* group, uint32_t t, uint32_t dim,
                       float* codes) {
  const uint8_t* row = channel_group_codes(group, code.bits, t, dim);
  const uint8_t* third = code.wide ? channel_group_wide_bits(group, t, dim) : nullptr;
  uint32_t k = 0;
  for (uint32_t c = 0; c < dim; ++c) {
    uint32_t q = channel_code(row, code.bits, c);
    if (third != nullptr && channel_step_wide(load_u16(group + 2 * (dim + c)))) {
      q |= ((third[k / 8] >> (k % 8)) & 1u) << 2;
      ++k;
    }
    codes[c] = static_cast<float>(q);
  }
}

void dequantize_channel_row(ChannelBits code, const uint8_t* group, uint32_t t, uint32_t dim,
                            float* y) {
  channel_row_codes(code, group, t, dim, y);
  for (uint32_t c = 0; c < dim; ++c) {
    const float mn = f16_to_f32(load_u16(group + 2 * c));
    const float step = f16_to_f32(load_u16(group + 2 * (dim + c)) & 0x7FFFu);
    y[c] = mn + step * y[c];
  }
}

}  // namespace kvs
