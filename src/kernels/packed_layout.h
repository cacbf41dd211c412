// The packed layout: the block-quantized weights of the integer matmul path (kernels/int8_gemm.h),
// rearranged once, at model load, into row-interleaved groups, keeping every bit of the GGUF
// blocks and no more bytes than they had (Q4_K: 2.8% more).
//
// A weight's rows are taken 16 at a time (a group; the last group repeats the last row). A
// group's blocks are stored one after the other, each block (a "group block") holding that block
// of the 16 rows, its integers interleaved so that one 64-byte vector holds the same 4 bytes of
// every row: byte 4r + i of a vector is row r's byte i. A 512-bit register then has one row per
// lane, and a 256-bit one half of the rows (rows 0-7 in bytes 0-31, rows 8-15 in bytes 32-63);
// the kernels broadcast 4 activation bytes and sum each lane's row exactly, with no horizontal
// sum and one f32 epilogue per 8 or 16 rows.
//
// A 32-element unit (one legacy block, one k-quant sub-block) of a row has 32 integers in "block
// order": bytes 4j .. 4j+3 hold elements 2j, 2j+1, 16+2j, 17+2j (the order the activations are
// quantized in); Q6_K's are in natural order (bytes 4j .. 4j+3 = elements 4j .. 4j+3), so that
// dwords 0-3 are the half under its first sub-scale and dwords 4-7 the other. Its "dword j" is
// those 4 bytes. Per unit:
//   low 4 bits (Q4_0, Q4_1, Q5_0, Q4_K, Q6_K): 4 vectors; vector k's byte 4r+i holds dword k's
//       byte i in its low nibble and dword k+4's byte i in its high nibble (256 bytes);
//   Q5_0 5th bits: 1 vector; byte 4r+i bit j = bit 4 of dword j's byte i (64 bytes);
//   Q6_K top 2 bits: 2 vectors; vector h's byte 4r+i bits 2q, 2q+1 = bits 4, 5 of dword
//       4h+q's byte i (128 bytes);
//   Q8_0: 8 vectors, vector j = dword j of each row, the signed bytes as stored (512 bytes).
// Then per group block, the scales, one per row, as stored in the file:
//   Q4_0, Q5_0, Q8_0   units[1], d f16 [16]
//   Q4_1               units[1], d f16 [16], m f16 [16]
//   Q4_K (256 elems)   units[8], sc u8 [8][16], mn u8 [8][16], d f16 [16], dmin f16 [16]
//                      (sc, mn: the 6-bit sub-block scale and min, unpacked from the 12 bytes)
//   Q6_K (256 elems)   (units + top bits)[8], sub-scales i8 [8][2][16] (unit, half, row),
//                      d f16 [16]
// Bytes per group block: Q4_0 288 (= 16 x 18), Q4_1 320, Q5_0 352, Q8_0 544, Q4_K 2,368
// (16 x 148 against 16 x 144), Q6_K 3,360 (= 16 x 210).
#pragma once

#include <cstdint>

#include "core/weight_type.h"

namespace kvs {

namespace packed_layout {
constexpr int64_t kRows = 16;      // rows of a group
constexpr int64_t kVector = 64;    // bytes of one interleaved vector (4 bytes x 16 rows)
constexpr int64_t kLowBits = 256;  // the 4 low-bit vectors of a unit
constexpr int64_t kQ5High = 64;
constexpr int64_t kQ8 = 512;
constexpr int64_t kF16 = 32;  // one f16 per row
// Q4_K super-block offsets.
constexpr int64_t kQ4KSc = 8 * kLowBits, kQ4KMn = kQ4KSc + 128, kQ4KD = kQ4KMn + 128,
                  kQ4KDmin = kQ4KD + kF16, kQ4KBytes = kQ4KDmin + kF16;
// Q6_K: a unit is its low bits then its 2 top-bit vectors.
constexpr int64_t kQ6KUnit = kLowBits + 128, kQ6KSc = 8 * kQ6KUnit, kQ6KD = kQ6KSc + 256,
                  kQ6KBytes = kQ6KD + kF16;

// Bytes of one group block of type t (0 for a type with no packed layout).
constexpr int64_t block_bytes(WeightType t) {
  switch (t) {
    case WeightType::kQ4_0: return kLowBits + kF16;
    case WeightType::kQ4_1: return kLowBits + 2 * kF16;
    case WeightType::kQ5_0: return kLowBits + kQ5High + kF16;
    case WeightType::kQ8_0: return kQ8 + kF16;
    case WeightType::kQ4_K: return kQ4KBytes;
    case WeightType::kQ6_K: return kQ6KBytes;
    default: return 0;
  }
}
}  // namespace packed_layout

}  // namespace kvs
