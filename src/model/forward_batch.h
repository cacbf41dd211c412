// ForwardBatch: one engine step's tokens, flattened across sequences (prefill chunks and decode
// tokens mixed). Plain arrays only: the model runner builds them from the cache manager's block
// tables; the model and kernels never see sequences or requests.
#pragma once

#include <cstdint>

namespace kvs {

struct ForwardBatch {
  int64_t num_tokens = 0;
  const int32_t* tokens = nullptr;        // [num_tokens] token ids
  const int32_t* positions = nullptr;     // [num_tokens] position of each token in its sequence
  const int64_t* slot_mapping = nullptr;  // [num_tokens] pool slot its K/V is written to
  const int32_t* context_len = nullptr;   // [num_tokens] positions it attends to (= position + 1)
  const uint32_t* const* block_table = nullptr;  // [num_tokens] its sequence's block table
  // Which tokens produce logits (indices into the batch, any order); logits row i belongs to
  // logits_rows[i].
  int64_t num_logits = 0;
  const int32_t* logits_rows = nullptr;
};

}  // namespace kvs
