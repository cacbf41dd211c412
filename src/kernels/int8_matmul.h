// The driver of the 8-bit integer GEMM (kernels/int8_gemm.h): quantizes the activation once per
// call, splits (rows x tokens) over the pool's threads and calls the kernels of the active ISA
// (kernels/int8_isa.h). matmul() tries it first and falls back to the Highway int16 path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/thread_pool.h"
#include "kernels/activations.h"
#include "kernels/int8_isa.h"
#include "kernels/weight_matrix.h"

namespace kvs {

// Weight types the int8 GEMM handles (the block-quantized ones).
[[nodiscard]] bool int8_matmul_supports(WeightType t);

// matmul() through the int8 GEMM of int8_isa_active(). Returns false, doing nothing, when that is
// Int8Isa::kNone or the type is not supported. Same contract and scratch rules as matmul().
bool int8_matmul(const WeightMatrix& w, const float* x, int64_t T, float* y, ThreadPool& pool);
// The most weights one int8_matmul_group call takes (a layer's Q, K, V).
inline constexpr size_t kMaxMatmulGroup = 4;
// The same for several weights of one type and one K over the same X (matmul_group): X is
// quantized once and all their rows share one parallel region. Returns false, doing nothing,
// where int8_matmul would for that type and T. Preconditions: the weights share type and cols;
// at most kMaxMatmulGroup of them.
bool int8_matmul_group(std::span<const MatmulOutput> outputs, const float* x, int64_t T,
                       ThreadPool& pool);

// matmul_gated() through the 8-bit GEMM: each work item computes one group of 16 rows of the gate
// and of the up projection into this thread's buffers and writes act(gate) * up to out ([T][rows])
// while they are in cache. Returns false, doing nothing, where int8_matmul would, or when the rows
// are not whole groups of 16. Preconditions: gate and up share type, rows and cols.
bool int8_matmul_gated(const WeightMatrix& gate, const WeightMatrix& up, GateActivation act,
                       const float* x, int64_t T, float* out, ThreadPool& pool);

// matmul_bench's peak: `iters` rounds of the ISA's tight dot-product loop (12 independent dot
// products of the GEMM's vector width: 256 bits, 512 on AVX512-VNNI) on the calling thread.
// CHECKs isa != kNone. int8_peak_macs_per_iter: the multiply-adds of one round.
int64_t int8_peak_loop(Int8Isa isa, int64_t iters);
[[nodiscard]] int64_t int8_peak_macs_per_iter(Int8Isa isa);

}  // namespace kvs
