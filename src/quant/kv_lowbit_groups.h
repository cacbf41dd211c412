// 3- and 2-bit groups of 32 elements for the Hadamard-rotated formats int3_had and int2_had
// (kv_format.h). A rotated head vector is close to Gaussian in every group, so its levels are
// symmetric and have no zero: the 2^bits codes c stand for d * (2c - (2^bits - 1)), d the
// group's f16 scale (half a step). Two bits give +-d, +-3d; three give +-d .. +-7d.
//
// Layout of one group (little endian):
//   [f16 d][8 bytes: 2-bit plane][4 bytes: high-bit plane, 3-bit only]
//   2-bit plane: the low two bits of element i's code at bits 2i .. 2i+1 of the 64-bit word,
//                so elements [16w, 16w + 16) lie in the 32-bit word w
//   high plane:  bit 2 of element i's code at bit i of the 32-bit word
// A reader of L lanes (L dividing 16) takes one 32-bit word per plane and shifts each lane by
// its element's position: no element straddles a word.
//
// The scale is searched (like int4's, kv_codecs.h): candidates d = f * amax / (2^bits - 1) for
// a few f <= 1 (f < 1 clips the largest elements for finer levels), each followed by a
// least-squares refit of d for its codes; the group keeps the smallest squared error among the
// candidates whose largest element error is <= amax / 2^(bits - 1). f = 1 always qualifies (its
// largest error is d = amax / (2^bits - 1)), which is the stated bound. NaN is stored as 0 and
// +-inf as +-the largest value.
#pragma once

#include <cstdint>

#include "quant/scale_fits.h"

namespace kvs {

inline constexpr uint32_t kLowBitGroup = 32;
// int2_had64's groups: 64 elements under one f16 scale, [f16 d][16 bytes: 2-bit plane], the plane
// the two 32-element planes of int2_had one after the other (element i at bits 2 (i % 32) of the
// 64-bit word i / 32). The scale is searched over all 64 elements (the same candidates and refits,
// their fits summed over the two halves), so a group costs 18 bytes where int2_had's two cost 20.
inline constexpr uint32_t kLowBitGroup64 = 64;

// Bytes of one group of `elems` (32, or 64 at 2 bits) elements: 10 for 2 bits, 14 for 3; 18 for
// 2 bits over 64.
[[nodiscard]] constexpr uint32_t lowbit_group_bytes(uint32_t bits, uint32_t elems = kLowBitGroup) {
  return 2 + elems * bits / 8;
}

// n % elems == 0; bits 2 or 3 with elems 32, bits 2 with elems 64. x is the (already rotated)
// vector.
void quantize_lowbit(uint32_t bits, const float* x, uint32_t n, uint8_t* dst,
                     uint32_t elems = kLowBitGroup);
// The same bytes, with the candidates' fits computed by `fits` (kernels/scale_fits.h in lanes).
void quantize_lowbit_with(uint32_t bits, const float* x, uint32_t n, uint8_t* dst, ScaleFitsFn fits,
                          uint32_t elems = kLowBitGroup);
void dequantize_lowbit(uint32_t bits, const uint8_t* src, uint32_t n, float* y,
                       uint32_t elems = kLowBitGroup);

// The code (0 .. 2^bits - 1) of element i (< the group's elements) of the group starting at
// `group`.
[[nodiscard]] uint32_t lowbit_code(uint32_t bits, const uint8_t* group, uint32_t i);

}  // namespace kvs
