// PagedAttentionArgs: what one paged-attention call reads and writes (plain arrays and the
// paged layout's strides). Its own header so that the kernel's helpers (segments, key scores)
// depend on the arguments, not on the kernel they serve.
#pragma once

#include <cstdint>

#include "quant/paged_kv_layout.h"

namespace kvs {

struct PagedAttentionArgs {
  PagedKvLayout kv;
  uint32_t layer = 0;  // within its layer group's blocks
  // The model's layer index: the row of kv.recent (quant/recent_window.h) it reads, if any.
  uint32_t model_layer = 0;
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

}  // namespace kvs
