// Weight matmul: Y = X * W^T for every weight type of core/weight_type.h.
//
// Paths:
//  * integer path: Q8_0, Q4_0, Q4_1, Q5_0, Q4_K, Q6_K. Each 32-element block of every activation
//    row is quantized once per call to int8 (dx = amax/127, q = round(x/dx)) and the rounded
//    block's sum s = dx * sum(q) is kept for the min terms. For each output (token t, row n) and
//    each block b in order, the weight block is dotted with the activation bytes exactly in int32
//    (isum_b), then in f32:
//        acc = fma(f32(isum_b), d_w * dx, acc);    Q4_1 / Q4_K: acc = fma(m_b, s_b, acc)
//    and y = acc. Two implementations of that one arithmetic, chosen per call by
//    kernels/int8_isa.h from CPUID: the 8-bit GEMM of kernels/int8_gemm.h (u8 x s8 dot products,
//    vpdpbusd with AVX512-VNNI / AVX-VNNI or vpmaddubsw on AVX2, 8 rows per vector), and the
//    Highway path below, which unpacks weights to int16 (pmaddwd). Default: the 8-bit GEMM for
//    every step on CPUs with AVX2, Highway on others. Both give the same bits.
//  * float path: F32, F16, BF16 (converted exactly to f32, FMA), Highway.
// (HWY_SCALAR falls back to dequantize + f32 dot.)
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
//
// Batch invariance: a token's output is the same bits whatever the other tokens of the call,
// the tiling and the thread count (each (token, row) dot product is summed in one fixed order).
#pragma once

#include <cstdint>
#include <span>

#include "core/thread_pool.h"
#include "kernels/activations.h"
#include "kernels/weight_matrix.h"

namespace kvs {

// Y[t*N + n] = sum_k X[t*K + k] * W[n][k] for t in [0, T).
// X: [T][K] f32, Y: [T][N] f32 (no alignment needed, must not overlap). T >= 1.
// Threads split output rows (and, in the 8-bit GEMM, token ranges when the rows run out).
// Scratch (the quantized activation, about 2.3 bytes per element of X) lives in thread_local
// buffers of the calling thread, grown on demand and reused: no allocation per call once warm.
// Must not be called from inside a parallel_for of the same pool (not reentrant).
void matmul(const WeightMatrix& w, const float* x, int64_t T, float* y, ThreadPool& pool);

// matmul() of several weights over the same X (a layer's Q, K and V; its gate and up), with the
// same bits as one matmul() each but fewer parallel regions: when the weights share their type
// and K and the 8-bit GEMM takes the step, X is quantized once and every weight's rows (or row
// panels) are split over the threads in one region. Otherwise one matmul() per weight.
void matmul_group(std::span<const MatmulOutput> outputs, const float* x, int64_t T,
                  ThreadPool& pool);

// A gated FFN's first half: out = act(X W_gate^T) * (X W_up^T), [T][F] (F = the weights' rows),
// with the bits of matmul_group({gate, up}) followed by gated_activation over [T][F]. Where the
// 8-bit GEMM takes the step, the activation runs inside the GEMM's parallel region on each group
// of rows as it is computed (no pass of its own on the calling thread, no [T][F] up array);
// elsewhere up_scratch ([T][F]) takes the up projection. Neither may overlap x or each other.
void matmul_gated(const WeightMatrix& gate, const WeightMatrix& up, GateActivation act,
                  const float* x, int64_t T, float* out, float* up_scratch, ThreadPool& pool);

// Scalar oracle: dequantize_row_reference per row, dot in double.
void matmul_reference(const WeightMatrix& w, const float* x, int64_t T, float* y);
// The same, rows split over the pool's threads (each output is computed exactly as above).
void matmul_reference(const WeightMatrix& w, const float* x, int64_t T, float* y, ThreadPool& pool);

}  // namespace kvs
