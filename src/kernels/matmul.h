// Weight matmul: Y = X * W^T for every weight type of core/weight_type.h.
//
// Error bound of matmul() vs. matmul_reference() (exact sum in double of dequantized weights):
//  * F32, F16, BF16, Q4_K, Q6_K (float path: weights are dequantized exactly to f32, products
//    accumulated in f32 with FMA):  |y - y_ref| <= 1e-5 * K^0.5 * sum_k |w_k x_k|  (f32 rounding,
//    tested with tol = 2e-5 * sum_k |w_k||x_k|).
//  * Q8_0, Q4_0, Q4_1 (integer path): each 32-element block of the activation row is quantized
//    once per matmul to int8, dx = amax/127, q = round(x/dx), so |x - dx*q| <= dx/2 = amax/254.
//    Each block's dot is computed exactly in int32 and scaled by d_w*dx in f32; the Q4_1 min term
//    uses the exact f32 block sum of x. Hence per block b:
//      |err_b| <= sum_k |w'_k| * amax_b / 254  with w' = d*q (the weight without the min),
//    and overall |y - y_ref| <= (1/254) * sum_b amax_b * sum_{k in b} |w'_k| + f32 rounding.
//    In relative terms: <= ~0.4% of sum_b amax_b*sum|w'| (tested with tol = 1/200 of that bound
//    plus 1e-5 * sum |w||x|). This is the same activation quantization llama.cpp uses (Q8_0/Q8_1
//    activations) and is well below the weight quantization error of 4-bit formats.
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
// Output rows are split across the pool's threads in chunks of 32 rows; tokens are processed in
// tiles of 4 so that each weight block is loaded once per tile. Scratch (the quantized activation)
// lives in a thread_local buffer of the calling thread, grown on demand and reused: no allocation
// per call once warm. Not reentrant on the same pool (ThreadPool::parallel_for is not).
void matmul(const WeightMatrix& w, const float* x, int64_t T, float* y, ThreadPool& pool);

// Scalar oracle: dequantize_row_reference per row, dot in double.
void matmul_reference(const WeightMatrix& w, const float* x, int64_t T, float* y);

}  // namespace kvs
