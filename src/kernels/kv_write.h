// Writes a step's new K and V vectors into the paged pool at their slots (slot = block *
// block_size + offset, from the cache manager's slot mapping), converting to the pool's format.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "quant/paged_kv_layout.h"

namespace kvs {

// k: [num_tokens][kv_heads][head_dim], v likewise; slot_mapping: [num_tokens] (distinct slots).
// With a pool the vectors are converted on its threads (the searched and rotated formats cost
// microseconds each); per-channel key groups are sealed on the calling thread (their tails are
// one cache, quant/key_tails.h).
void write_kv(const PagedKvLayout& kv, uint32_t layer, int64_t num_tokens,
              const int64_t* slot_mapping, const float* k, const float* v,
              ThreadPool* pool = nullptr);

}  // namespace kvs
