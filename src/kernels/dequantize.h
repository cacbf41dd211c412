// Row dequantization of GGUF weight blocks to f32 (used for token-embedding lookups and as the
// test oracle of the matmul kernels). Layouts are ggml's, see core/weight_type.h.
#pragma once

#include <cstdint>

#include "core/weight_type.h"

namespace kvs {

// dst[0..n) = the n elements stored at src. Preconditions: n is a multiple of the type's
// block_elems; src holds weight_row_bytes(type, n) bytes (no alignment needed); dst holds n
// floats. Scalar, bit-exact ggml semantics:
//   Q8_0 x = d*q;  Q4_0 x = d*(q-8) (lo nibbles are elements 0..15, hi nibbles 16..31);
//   Q4_1 x = d*q + m;  Q4_K x = d*sc*q - dmin*mn (6-bit packed sc/mn per 32-element sub-block);
//   Q6_K x = d*sc*(q-32) (q = 4 low bits from ql | 2 high bits from qh, int8 sc per 16 elements);
//   Q5_0 x = d*((q | hbit << 4) - 16) (q: nibbles as Q4_0; hbit of element e: bit e of qh).
void dequantize_row_reference(WeightType type, const void* src, float* dst, int64_t n);

// Same result as dequantize_row_reference (bit-identical: every element is one f32 multiply /
// multiply-add of the same operands), SIMD for F16, BF16, Q8_0, Q4_0, Q4_1 via Highway runtime
// dispatch; the k-quants use the scalar path.
void dequantize_row(WeightType type, const void* src, float* dst, int64_t n);

// Q4_K packs 8 (scale, min) pairs of 6 bits each into 12 bytes `s`: for sub-block j < 4 the low 6
// bits of bytes j and j+4; for j >= 4 the low/high nibble of byte j+4 plus the top 2 bits of byte
// j-4 (scale) and byte j (min). Shared by the dequantizer and the matmul kernels.
inline void q4k_scale_min(int j, const uint8_t* s, int* sc, int* mn) {
  if (j < 4) {
    *sc = s[j] & 63;
    *mn = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

}  // namespace kvs
