// Writes a step's new K and V vectors into the paged pool at their slots (slot = block *
// block_size + offset, from the cache manager's slot mapping), converting to the pool's format.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "quant/paged_kv_layout.h"

namespace kvs {

// k: [num_tokens][kv_heads][head_dim], v likewise; slot_mapping: [num_tokens] (distinct slots).
// With a pool the vectors are converted on its threads (the searched and rotated formats cost
// microseconds each), and so are per-channel key groups sealed: the calling thread first makes
// every lookup and update of their tails (one cache, quant/key_tails.h) in order, then each
// (group, kv head) is sealed on its own. The bytes are one thread's in every split.
void write_kv(const PagedKvLayout& kv, uint32_t layer, int64_t num_tokens,
              const int64_t* slot_mapping, const float* k, const float* v,
              ThreadPool* pool = nullptr);

}  // namespace kvs
