// Paged attention: each query token attends to the first `context_len` positions of its own
// sequence, whose K/V live in non-contiguous blocks of the pool, found through the token's
// block table (quant/paged_kv_layout.h documents the layout). The same kernel serves prefill
// chunks and decode tokens, mixed in one batch. Kernels see only arrays, never sequences.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/paged_attention_args.h"

namespace kvs {

// Highway kernel (runtime dispatch), threads over (token, kv head) pairs. Keys in the int8
// format are scored against the query quantized to int8 (kernels/int8_key_dots.h), with exact
// integer dot products (VNNI where the CPU has it); the reference does the same.
void paged_attention(const PagedAttentionArgs& args, ThreadPool& pool);
// Scalar reference (the test oracle): double accumulation, plain loops.
void paged_attention_reference(const PagedAttentionArgs& args);

// The kernel's softmax step alone, for tests: x[i] = e^(x[i] - m) in place (m >= every x[i], the
// row's maximum), returning their sum.
float attention_exp_sub_and_sum(float* x, int32_t n, float m);

}  // namespace kvs
