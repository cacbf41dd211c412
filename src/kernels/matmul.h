// Weight matmul: Y = X * W^T for every weight type of core/weight_type.h.
//
// Two inner paths (Highway, runtime dispatch over SSSE3/SSE4/AVX2/AVX-512/EMU128; HWY_SCALAR
// falls back to dequantize + f32 dot):
//  * integer path: Q8_0, Q4_0, Q4_1, Q4_K, Q6_K. Each 32-element block of every activation row is
//    quantized once per call to int8 (dx = amax/127, q = round(x/dx)) and the exact f32 block sum
//    is kept for the min terms. Weight blocks are unpacked to int16 (Q6_K: with its int8
//    sub-scale folded in) and dotted exactly in int32 (pmaddwd), then scaled by d_w*dx in f32.
//  * float path: F32, F16, BF16 (converted exactly to f32, FMA).
//
// Error bound of matmul() vs. matmul_reference() (exact double sum of dequantized weights), per
// output y[t][n], with p_k = |w_k * x_k|:
//  * float path: f32 accumulation only, |y - y_ref| <= K * 2^-24 * sum_k p_k worst case; in
//    practice (16-lane partial sums) far less. Tested with tol = 3e-5 * sum_k p_k.
//  * integer path: each 32-element activation block is rounded to int8 with d = amax_b / 127,
//    and the whole product (min terms included: Q4_1/Q4_K use d * sum of the rounded block) is
//    exactly sum_k w_k * xq_k up to f32 rounding. So |y - y_ref| <= sum_b amax_b/254 *
//    sum_{k in b} |w_k| + f32 rounding; for random-sign errors ~0.3% of |y| on SmolLM2's
//    weights. This is llama.cpp's activation quantization (Q8_0/Q8_1). Tested with 1.01 * that
//    bound + 3e-5 * sum_k p_k, and against the reference on the rounded activations to 3e-5.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "core/weight_type.h"

namespace kvs {

struct WeightMatrix {
  WeightType type;
  const void* data;    // rows x row_bytes, row-major; each row = cols elements in blocks
  int64_t rows;        // output features N
  int64_t cols;        // input features K (multiple of the block size)
  uint64_t row_bytes;  // weight_row_bytes(type, cols)
};

// Y[t*N + n] = sum_k X[t*K + k] * W[n][k] for t in [0, T).
// X: [T][K] f32, Y: [T][N] f32 (no alignment needed, must not overlap). T >= 1.
// Output rows are split across the pool's threads in chunks of 16 rows; each thread walks its rows
// once per tile of up to 4 tokens, so each weight block is unpacked once per tile and stays in
// L1/L2 for the next tile. Scratch (the quantized activation, T*K*2 + T*K/4 bytes) lives in a
// thread_local buffer of the calling thread, grown on demand and reused: no allocation per call
// once warm. Must not be called from inside a parallel_for of the same pool (not reentrant).
void matmul(const WeightMatrix& w, const float* x, int64_t T, float* y, ThreadPool& pool);

// Scalar oracle: dequantize_row_reference per row, dot in double.
void matmul_reference(const WeightMatrix& w, const float* x, int64_t T, float* y);
// The same, rows split over the pool's threads (each output is computed exactly as above).
void matmul_reference(const WeightMatrix& w, const float* x, int64_t T, float* y,
                      ThreadPool& pool);

}  // namespace kvs
