// Writes a step's new K and V vectors into the paged pool at their slots (slot = block *
// block_size + offset, from the cache manager's slot mapping), converting to the pool's format.
#pragma once

#include <cstdint>

#include "quant/paged_kv_layout.h"

namespace kvs {

// k: [num_tokens][kv_heads][head_dim], v likewise; slot_mapping: [num_tokens].
void write_kv(const PagedKvLayout& kv, uint32_t layer, int64_t num_tokens,
              const int64_t* slot_mapping, const float* k, const float* v);

}  // namespace kvs
