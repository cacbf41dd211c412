// Attention scores of int8 keys as exact integer dot products (the K side of paged attention for
// the int8 KV format, and for 4-bit per-channel keys: Q4RowDotsFn below). A query head is quantized
// once per attention item to int8 with one scale (quantize_query_int8: d = amax / 127, q = round(x
// / d), llama.cpp's choice for the query of a quantized K cache), and every score is then
//
//     score = (float(sum_i q_i * k_i) * d_q) * (d_k * attention scale)
//
// where k_i in [-127, 127] are the stored key bytes and d_k their f16 scale. The integer sum is
// exact (|sum| <= D * 127 * 127 < 2^24 for head dims up to 1040, so its float is exact too):
// every instruction set gives the same score bits, and a key's score does not depend on the
// keys, blocks or threads it is computed with.
//
// The sums come from the Highway int16 path of paged_attention.cpp on every CPU, or from the
// VNNI kernels below (vpdpbusd, raw intrinsics in their own translation units with explicit
// target flags), chosen from CPUID through kernels/int8_isa.h.
#pragma once

#include <cstdint>

#include "quant/kv_channel_groups.h"

namespace kvs {

// q[0, D) = round(x / d) in [-127, 127] with d = max |x| / 127 (0 when x is all zero, and then
// q = 0); returns d. *sum = sum of q. Plain scalar code: the kernel and the reference share it.
float quantize_query_int8(const float* x, uint32_t D, int8_t* q, int32_t* sum);

namespace int8_key_dots {

// Lines to prefetch while the keys are scored (the next K blocks, this block's V): spread over
// the call's keys a few at a time, as the Highway kernel does.
struct Prefetch {
  const uint8_t* p[2] = {nullptr, nullptr};
  uint64_t bytes[2] = {0, 0};
};

// out[g * out_stride + j] = float(sum_i q[g * D + i] * key_j[i]) for g < ng (1..4) and j < n,
// key j's D bytes at keys + j * key_bytes. qsum[g] = sum of q[g * D + i]. D % chunk == 0.
using KeyDotsFn = void (*)(const int8_t* q, const int32_t* qsum, int ng, uint32_t D,
                           const uint8_t* keys, uint64_t key_bytes, int32_t n, float* out,
                           int64_t out_stride, const Prefetch& prefetch);

// 4-bit per-channel key rows (quant/kv_channel_groups.h: q4_0's nibble order, no scales), row j's
// D / 2 bytes at rows + j * D / 2: out[g * out_stride + j] = float(sum_i q[g * D + i] *
// (code_j[i] - 8)) for g < ng (1..4) and j < n, q in element order. qsum[g] = sum of q[g * D + i].
// D % chunk == 0. Exact: |sum| <= D * 127 * 8 < 2^24 for any head dim up to 16K.
using Q4RowDotsFn = void (*)(const int8_t* q, const int32_t* qsum, int ng, uint32_t D,
                             const uint8_t* rows, int32_t n, float* out, int64_t out_stride,
                             const Prefetch& prefetch);

// int2mix_chan64 rows (quant/kv_channel_groups.h): row j's 2-bit codes (LSB first) at
// rows + j * D / 4, its third bits at thirds + j * D / 32 (bit k: the k-th wide channel's, in
// channel order); `steps`: the group's D f16 steps, whose sign bits mark the wide channels (D / 4
// of them). out[g * out_stride + j] = float(sum_i q[g * D + i] * code_j[i]), code = the 2-bit
// code + 4 x the third bit, q in channel order. D % 64 == 0 and D <= 256. Exact: |sum| <=
// D * 127 * 7 < 2^24.
using MixRowDotsFn = void (*)(const int8_t* q, int ng, uint32_t D, const uint8_t* steps,
                              const uint8_t* rows, const uint8_t* thirds, int32_t n, float* out,
                              int64_t out_stride, const Prefetch& prefetch);

struct Kernels {
  KeyDotsFn dots;
  Q4RowDotsFn q4_rows;
  MixRowDotsFn mix_rows;  // nullptr on AVX-VNNI (the Highway reader gives the same sums)
  uint32_t chunk;         // products per vpdpbusd: 64 (AVX512-VNNI) or 32 (AVX-VNNI)
};

// Per-channel key formats scored against int8 queries (each group's q x step rounded to int8,
// kernels/attention_channel_keys-inl.h): 4-bit codes and int2mix_chan64's.
[[nodiscard]] inline bool channel_keys_in_int8(ChannelBits code) {
  return code.bits == 4 || code.wide;
}

const Kernels& kernels_avx512vnni();
const Kernels& kernels_avxvnni();

// The VNNI kernels of int8_isa_active(), or nullptr when it is not a VNNI ISA (the Highway path
// then computes the same sums).
const Kernels* active();

}  // namespace int8_key_dots
}  // namespace kvs
