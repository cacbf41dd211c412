// Per-channel key groups (the int4_chan, int3_chan and int2_chan formats, and their *_chan64
// forms): keys quantized per channel over 16 (64) tokens, as KIVI (2024) quantizes keys. A key's
// large channels keep their size from token to token, so a per-channel range fits them and leaves
// the small channels their own fine step, where a per-token scale is set by the largest channel.
//
// One (block, layer, kv head) K region of a pool with block size B (a multiple of the group's G
// tokens, kv_channel_group_tokens) holds B / G groups, each of kv_vector_bytes(dtype, dim) x G
// bytes:
//   [dim x f16 minimum][dim x f16 step][G rows of dim codes of `bits` bits (channel_code)]
// value = minimum + step x code, code in [0, 2^bits - 1]. A group may be partly filled: its
// parameters then cover its first n rows only, and are recomputed when rows are added
// (quant/key_tails.h keeps the rows' f16 keys for that, so a group filled one token at a time ends
// with the same bytes as one written at once).
//
// int2mix_chan64 (kv_dtype_wide_channels) is int2_chan64 with the quarter of the channels of widest
// range over the group's rows (the lower channel first among equal ranges) at 3 bits, value =
// minimum + step x code with code in [0, 7] (in [0, 3] for the others). A wide channel's f16 step
// has its sign bit set (a step is never negative otherwise; the value is |step|). Its 2-bit rows
// are int2_chan64's, holding the low two bits of every code; after the group's 64 rows come 64
// rows of dim / 32 bytes, the third bits of the wide channels in channel order (LSB first):
//   [dim x f16 minimum][dim x f16 step][64 rows of dim / 4 bytes][64 rows of dim / 32 bytes]
// Which channels are wide can change with any row, so its groups are sealed anew over all of their
// rows (from the f16 keys, quant/key_tails.h) whenever rows are added.
//
// Inputs are rounded to f16 first (the keys a group is sealed from are f16 either way). The
// minimum is rounded down and the step up to f16, so no element is clipped: |x - y| <= step / 2
// with step <= (max - min) / (2^bits - 1) x (1 + 2^-9) + the smallest f16 step, NaN stored as 0 and
// +-inf as +-65504.
#pragma once

#include <cstdint>

#include "quant/kv_format.h"

namespace kvs {

// A per-channel format's code: its bits per element, and whether a quarter of the channels take
// one bit more (int2mix_chan64). From a bit count alone: the plain formats.
struct ChannelBits {
  uint32_t bits = 0;
  bool wide = false;
  constexpr ChannelBits(uint32_t b, bool w = false) : bits(b), wide(w) {}  // NOLINT: implicit
};

// 4, 3 or 2 for the per-channel formats, 0 for every other.
[[nodiscard]] uint32_t channel_group_bits(KvDtype dtype);
// The code of a per-channel format (bits 0 for every other).
[[nodiscard]] ChannelBits channel_bits(KvDtype dtype);
// Bytes of one group of `tokens` rows of `dim` channels (tokens x kv_vector_bytes).
[[nodiscard]] uint64_t channel_group_bytes(ChannelBits code, uint32_t tokens, uint32_t dim);

// A key as groups are sealed from it: NaN -> 0, clamped to +-65504, rounded to f16 (the bits).
[[nodiscard]] uint16_t channel_key_f16(float x);

// Seals rows [0, n) (1 <= n <= the group's tokens) of a group from x[n][dim] (row stride x_stride
// floats): each channel's minimum and step over rows [range_from, n) (all n when range_from >= n),
// and every row's codes (rows before range_from clamped to that range). Rows n.. are left as
// they are. The attention sink leaves position 0 out of its group's range (kv_write.h): it is
// read from the sink's f16 rows, and its key, often far from the others, would widen the range.
// `keys_f16`, if given, gets the f16 key each row was sealed from (channel_key_f16), n rows of
// dim: what a tail and the query's own group hold.
void quantize_channel_group(ChannelBits code, const float* x, uint64_t x_stride, uint32_t n,
                            uint32_t dim, uint8_t* group, uint32_t range_from = 0,
                            uint16_t* keys_f16 = nullptr);
// quantize_channel_group's bytes for rows [0, n), given that `group` holds its seal of rows
// [0, sealed) (sealed < n) with the same range_from (the earlier range is continued, not taken
// again: a group's range_from is a function of its place in the sequence) and that `earlier`
// holds the f16 keys that seal was made of
// (channel_key_f16 of each, rows of dim one after another: what a tail holds); x holds the new
// rows [sealed, n) (row stride x_stride floats): a group filled one token at a time
// (kernels/kv_write.cpp, from its f16 tail). A row's code is a function of its key and its
// channel's minimum and step, and those of the channel's range: the earlier seal's range is
// taken on the f16 rows and continued with the new ones, only the channels whose range moved get
// a new minimum and step, only those whose minimum or step moved are coded again over the
// earlier rows, and the new rows are coded in SIMD lanes (quant/channel_codes.h). sealed = 0
// (earlier unused) is quantize_channel_group. `keys_f16`, if given, gets the new rows' f16 keys
// (n - sealed rows of dim).
void reseal_channel_group(ChannelBits code, const uint16_t* earlier, const float* x,
                          uint64_t x_stride, uint32_t n, uint32_t dim, uint8_t* group,
                          uint32_t range_from, uint32_t sealed, uint16_t* keys_f16 = nullptr);
// Row t of a group, decoded.
void dequantize_channel_row(ChannelBits code, const uint8_t* group, uint32_t t, uint32_t dim,
                            float* y);
// Row t's codes (int2mix_chan64's wide channels with their third bit), as floats.
void channel_row_codes(ChannelBits code, const uint8_t* group, uint32_t t, uint32_t dim,
                       float* codes);
// The parameters and one row's codes as the attention kernel reads them.
[[nodiscard]] inline const uint8_t* channel_group_minimums(const uint8_t* group) { return group; }
[[nodiscard]] inline const uint8_t* channel_group_steps(const uint8_t* group, uint32_t dim) {
  return group + 2 * uint64_t{dim};
}
[[nodiscard]] inline const uint8_t* channel_group_codes(const uint8_t* group, uint32_t bits,
                                                        uint32_t t, uint32_t dim) {
  return group + 4 * uint64_t{dim} + uint64_t{t} * dim * bits / 8;
}
// The third bits of row t of an int2mix_chan64 group: dim / 32 bytes, wide channel k (in channel
// order) at bit k % 8 of byte k / 8.
[[nodiscard]] inline const uint8_t* channel_group_wide_bits(const uint8_t* group, uint32_t t,
                                                            uint32_t dim) {
  return group + 4 * uint64_t{dim} + uint64_t{kMaxChannelGroupTokens} * dim / 4 +
         uint64_t{t} * dim / 32;
}
// Whether an f16 step marks its channel wide (its sign bit), and the step's value bits.
[[nodiscard]] inline bool channel_step_wide(uint16_t step16) { return (step16 & 0x8000u) != 0; }

// Code i of a row. 4-bit rows are laid out as llama.cpp's q4_0 (and kvserve's int4) blocks
// without their scale: per 32 codes, 16 bytes, byte j holding code j (low nibble) and j + 16
// (high), so the attention kernel reads them with int4's reader. 3- and 2-bit codes are packed
// LSB first.
[[nodiscard]] inline uint32_t channel_code(const uint8_t* row, uint32_t bits, uint32_t i) {
  if (bits == 4) {
    const uint8_t byte = row[i / 32 * 16 + i % 16];
    return i % 32 < 16 ? byte & 0x0Fu : byte >> 4;
  }
  const uint32_t bit = i * bits;
  const uint32_t two = row[bit / 8] | (bit % 8 + bits > 8 ? uint32_t{row[bit / 8 + 1]} << 8 : 0u);
  return (two >> (bit % 8)) & ((1u << bits) - 1);
}

}  // namespace kvs
