// Paged attention: each query token attends to the first `context_len` positions of its own
// sequence, whose K/V live in non-contiguous blocks of the pool, found through the token's
// block table (quant/paged_kv_layout.h documents the layout). The same kernel serves prefill
// chunks and decode tokens, mixed in one batch. Kernels see only arrays, never sequences.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "quant/paged_kv_layout.h"

namespace kvs {

struct PagedAttentionArgs {
  PagedKvLayout kv;
  uint32_t layer = 0;
  int64_t num_tokens = 0;
  uint32_t num_heads = 0;  // query heads; num_heads % kv.kv_heads == 0 (grouped-query attention)
  float scale = 1.0f;      // usually 1/sqrt(head_dim)
  // Sliding-window attention: a token at position p sees keys [p - window + 1, p] only (its
  // last `window` positions); 0 = every position. Blocks before the window are never read.
  uint32_t window = 0;
  const float* q = nullptr;  // [num_tokens][num_heads][head_dim], RoPE applied
  float* out = nullptr;      // [num_tokens][num_heads][head_dim]
  // Per token: how many positions of its sequence it sees (its position + 1 for causal
  // attention), and its sequence's block table (physical block ids, logical order).
  const int32_t* context_len = nullptr;
  const uint32_t* const* block_table = nullptr;
  // Shared-prefix (cascade) attention: a segment of keys that several tokens see through the
  // same physical blocks is read once for all of them (kernels/attention_segments.h). Outputs
  // are bit-identical either way; false reads every token's keys separately (benchmarks).
  bool share_segments = true;
};

// Highway kernel (runtime dispatch), threads over (token, kv head) pairs. Keys in the int8
// format are scored against the query quantized to int8 (kernels/int8_key_dots.h), with exact
// integer dot products (VNNI where the CPU has it); the reference does the same.
void paged_attention(const PagedAttentionArgs& args, ThreadPool& pool);
// Scalar reference (the test oracle): double accumulation, plain loops.
void paged_attention_reference(const PagedAttentionArgs& args);

}  // namespace kvs
