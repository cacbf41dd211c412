// 8-bit integer GEMM: the fast path of matmul() for block-quantized weights (Q4_0, Q4_1, Q5_0,
// Q8_0, Q4_K, Q6_K) on x86 CPUs with AVX2. One kernel set per Int8Isa (kernels/int8_isa.h), each
// in its own translation unit compiled with explicit target flags; the driver that quantizes
// the activations and splits the work over threads is int8_matmul.cpp (baseline code).
//
// Arithmetic. Each 32-element block of an activation row is quantized once per call to int8
// (d = amax / 127, q = round(x / d): llama.cpp's Q8 activations). A weight block is unpacked to
// 32 unsigned bytes u (Q4 nibbles 0..15, Q5_0 0..31, Q6_K 0..63, Q4_K nibbles; Q8_0 see below)
// and dotted with the activation bytes into 8 int32 lanes, exactly:
//   AVX2      vpmaddubsw (u8 x s8 -> s16 pair sums, never saturating for these ranges) then
//             vpmaddwd against ones (Q6_K: against its int8 sub-scales) -> int32;
//   VNNI      vpdpbusd (u8 x s8, four products summed into int32).
// Offsets (Q4_0: q - 8, Q5_0: q - 16, Q6_K: q - 32) are subtracted as off x (activation sums),
// precomputed once per activation block; Q8_0's signed weights use the sign trick on AVX2
// (|w| x sign(x, w)) and w + 128 with a -128 x sum(x) offset on VNNI. Lane j of a block always
// holds elements {2j, 2j+1, 16+2j, 17+2j} (the "block order" below), which is exactly the lane
// layout of the Highway int16 path on AVX2, so every ISA produces the same int32 lanes. The
// lanes are converted to f32 and FMA'd with d_w * d_x into one accumulator per (row, token);
// min terms (Q4_1, Q4_K) are dotted per chunk of 256 blocks; the 8 lanes are reduced at the end.
// The order of these f32 operations does not depend on the token's batch, tile or thread: a
// token's output is the same bits whatever else runs with it (matmul.h: batch invariance), and
// the same bits as the Highway int16 path on its AVX2 target.
//
// Tiling. One token (decode): rows in pairs, weight blocks unpacked straight from the GGUF bytes
// and prefetched ahead. Up to kDirectMaxT tokens: the same, with one accumulator per (row,
// token). More tokens: a panel of kPanelRows rows is unpacked once into an L1/L2-resident buffer
// (block-order bytes + f32 scales) and swept by a register-blocked micro-kernel of kTileRows rows
// x kTileTokens tokens, the token tile's activations staying in L1.
#pragma once

#include <cstdint>

#include "core/weight_type.h"

namespace kvs::int8_gemm {

// The rows of a weight matrix as stored in the GGUF file.
struct Weights {
  WeightType type;
  const uint8_t* data;
  int64_t rows, cols;
  uint64_t row_bytes;
};

// The activation of one call, quantized once. Blocks are stored in block order: the 32 bytes of
// block b hold its elements 0,1,16,17, 2,3,18,19, ..., 14,15,30,31 (4 bytes per int32 lane).
// Every tile reads exactly its tokens (a short last tile is a narrower micro-kernel), so the
// arrays need only the call's T rows.
struct Acts {
  int8_t* q;     // [T][K]
  float* d;      // [T][KB] block scale
  float* s;      // [T][KB] d * (sum of the block's q): the min terms of Q4_1 / Q4_K
  uint8_t* off;  // [T][KB][32] offset correction of the block (types with an offset)
  int64_t K, KB;
};

constexpr int64_t kPanelRows = 16;  // rows unpacked together into the panel buffer
constexpr int64_t kTileRows = 2;    // micro-kernel rows (kPanelRows is a multiple)
constexpr int64_t kTileTokens = 4;  // micro-kernel tokens
constexpr int64_t kDirectMaxT = 4;  // up to this many tokens: no panel, unpack in registers
constexpr int64_t kPanelBlockBytes = 32 + 4 + 4 + 4;  // block-order bytes, d_w, min, sub-scales

struct Kernels {
  // Quantizes tokens [t0, t1) of x [T][K] into a (which has room for them).
  void (*quantize)(WeightType type, const float* x, int64_t t0, int64_t t1, const Acts& a);
  // y[t * N + n] for rows [n0, n1) and tokens [t0, t1) (N = w.rows). `panel` holds
  // kPanelRows * KB * kPanelBlockBytes bytes, 32-byte aligned (unused, may be null, when
  // t1 - t0 <= direct_max_t).
  void (*gemm)(const Weights& w, const Acts& a, int64_t n0, int64_t n1, int64_t t0, int64_t t1,
               float* y, uint8_t* panel);
  // The tight loop of the ISA's best 8-bit dot product (matmul_bench's peak): `iters` rounds of
  // 12 independent 32-byte dot products, 32 x 12 multiply-adds each. Returns a checksum.
  int64_t (*peak_loop)(int64_t iters);
  // Steps of up to this many tokens read the weights straight from the GGUF bytes (no panel):
  // kDirectMaxT, or 8 with AVX-512's 32 vector registers.
  int64_t direct_max_t;
};

const Kernels& kernels_avx2();
const Kernels& kernels_avxvnni();
const Kernels& kernels_avx512vnni();

}  // namespace kvs::int8_gemm
