// ForwardBatch: one engine step's tokens, flattened across sequences (prefill chunks and decode
// tokens mixed). Plain arrays only: the model runner builds them from the cache manager's block
// tables; the model and kernels never see sequences or requests.
//
// Layer groups (kvcache/kv_cache_groups.h): each group of layers has its own blocks, so its own
// slot mapping and block tables; a layer reads and writes through those of its group.
#pragma once

#include <cstdint>

namespace kvs {

struct ForwardBatch {
  int64_t num_tokens = 0;
  const int32_t* tokens = nullptr;     // [num_tokens] token ids
  const int32_t* positions = nullptr;  // [num_tokens] position of each token in its sequence
  uint32_t num_groups = 1;
  const int64_t* slot_mapping = nullptr;  // [num_groups][num_tokens] pool slot of its K/V
  const int32_t* context_len = nullptr;   // [num_tokens] positions it attends to (= position + 1)
  // [num_groups][num_tokens] its sequence's block table in that group.
  const uint32_t* const* block_table = nullptr;
  // The recent-token window (quant/recent_window.h), when the pool has one: per token its
  // sequence's window slot and floor.
  const int32_t* recent_slot = nullptr;
  const int32_t* recent_floor = nullptr;
  // Which tokens produce logits (indices into the batch, any order); logits row i belongs to
  // logits_rows[i].
  int64_t num_logits = 0;
  const int32_t* logits_rows = nullptr;
};

}  // namespace kvs
