// 8-bit integer GEMM: the fast path of matmul() for block-quantized weights (Q4_0, Q4_1, Q5_0,
// Q8_0, Q4_K, Q6_K) on x86 CPUs with AVX2. One kernel set per Int8Isa (kernels/int8_isa.h), each
// in its own translation unit compiled with explicit target flags; the driver that quantizes
// the activations and splits the work over threads is int8_matmul.cpp (baseline code).
//
// Arithmetic. Each 32-element block of an activation row is quantized once per call to int8
// (d = amax / 127, q = round(x / d): llama.cpp's Q8 activations). A weight block is unpacked to
// 32 unsigned bytes u (Q4 nibbles 0..15, Q5_0 0..31, Q6_K 0..63, Q4_K nibbles; Q8_0 see below)
// and its exact int32 sum with the activation bytes is formed, for 8 rows at once:
//   AVX2      vpmaddubsw (u8 x s8 -> s16 pair sums, never saturating for these ranges) then
//             vpmaddwd against ones -> int32;
//   VNNI      vpdpbusd (u8 x s8, four products summed into int32).
// Offsets (Q4_0: q - 8, Q5_0: q - 16) start the sum at -off x (sum of the activation bytes),
// precomputed once per activation block; Q6_K sums each 16-element half apart, from its own
// -32 x (sum of the half's activation bytes), and multiplies it by the half's int8 sub-scale
// (vpmulld) once per block; Q8_0's signed weights use the sign trick on AVX2 (|w| x sign(x, w)) and
// w + 128 with a -128 x sum(x) start on VNNI. The sums are exact, so every ISA has the same
// integers. Then, per (row, token) and block b in order, in f32:
//   acc = fma(f32(isum_b), d_w * d_x, acc);  Q4_1 / Q4_K also acc = fma(m_b, s_b, acc)
// (s_b = d_x * sum of the block's q), and y = acc: matmul.h's arithmetic, the same on every path,
// so a token's output is the same bits whatever else runs with it (batch invariance) and on every
// ISA, the Highway int16 path included.
//
// Tiling. The weights come packed (kernels/packed_layout.h: groups of 16 rows, one vector holding
// the same 4 bytes of every row), either once at model load or one group at a time by the driver.
// A micro-kernel sweeps 8 rows (16 on AVX-512) x up to 4 tokens (8 on AVX-512): the activation's
// 4 bytes are broadcast, each lane is one (row, token) output, and the f32 epilogue is one vector
// operation per 8 or 16 rows. The same kernel serves decode (1 token) and prefill.
#pragma once

#include <cstdint>

#include "core/weight_type.h"

namespace kvs::int8_gemm {

// The activation of one call, quantized once, block-major: block b of token t is at [b][t], so
// that a micro-kernel reads its tokens' block at constant offsets from one pointer. A block's 32
// bytes hold its elements 0,1,16,17, 2,3,18,19, ..., 14,15,30,31 ("block order", 4 bytes per
// int32 lane); for Q6_K, whose two 16-element halves have their own sub-scales, in natural order
// (lanes 0-3 one half, 4-7 the other).
struct Acts {
  int8_t* q;           // [KB][T][32]
  float* d;            // [KB][T] block scale
  float* s;            // [KB][T] d * (sum of the block's q): the min terms of Q4_1 / Q4_K
  int32_t* osum;       // [KB][T] start of the block's integer sum: -offset x (sum of its q)
  int32_t* half_osum;  // [KB][T][2] Q6_K: -32 x (sum of the q of elements 0..15, of 16..31)
  // T: the tokens from one block's row to the next (a multiple of 16, at least the call's
  // tokens; the rows' tail is never read).
  int64_t K, KB, T;
};

constexpr int64_t kPackedRows = 16;  // rows of a packed group (packed_layout::kRows)
constexpr int64_t kTileTokens = 4;   // tokens per micro-kernel call on AVX2 (up to 12 on AVX-512)

struct Kernels {
  // Quantizes tokens [t0, t1) of x [T][K] into a (which has room for them).
  void (*quantize)(WeightType type, const float* x, int64_t t0, int64_t t1, const Acts& a);
  // y[t * N + n0 + r] for the first `rows` (<= 16) rows of one packed group of type `type` and
  // tokens [t0, t1). Tiles of one token prefetch the weights only with `prefetch_one`
  // (int8_prefetch_one_token()); wider tiles always do.
  void (*gemm)(WeightType type, const uint8_t* group, const Acts& a, int64_t t0, int64_t t1,
               float* y, int64_t N, int64_t n0, int rows, bool prefetch_one);
  // The tight loop of the ISA's best 8-bit dot product (matmul_bench's peak): `iters` rounds of
  // 12 independent dot products of the GEMM's vector width, peak_macs_per_iter multiply-adds in
  // all. Returns a checksum.
  int64_t (*peak_loop)(int64_t iters);
  int64_t peak_macs_per_iter;
};

const Kernels& kernels_avx2();
const Kernels& kernels_avxvnni();
const Kernels& kernels_avx512vnni();

}  // namespace kvs::int8_gemm
