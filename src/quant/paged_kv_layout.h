// PagedKvLayout: where one (block, layer, KV head) lives in a paged KV pool, as plain strides.
// kvcache's KvBlockStorage owns the bytes and fills this in; the kernels (kv_write, paged
// attention) read and write through it and see nothing else of the cache.
//
//   // [num_blocks][layers][K: kv_heads][block_size][k_vector_bytes]
//   //                     [V: kv_heads][block_size][v_vector_bytes]
// A vector is one head's K (or V) for one token in its KvDtype, scales included (kv_format.h).
#pragma once

#include <cstdint>

#include "quant/kv_format.h"

namespace kvs {

class KeyTails;
class RecentWindow;

struct PagedKvLayout {
  uint8_t* base = nullptr;
  uint32_t block_size = 0;
  uint32_t kv_heads = 0;
  uint32_t head_dim = 0;
  KvDtype k_dtype = KvDtype::kF16;
  KvDtype v_dtype = KvDtype::kF16;
  uint64_t k_vector_bytes = 0;
  uint64_t v_vector_bytes = 0;
  uint64_t block_bytes = 0;
  uint64_t layer_bytes = 0;  // one layer's K and V within a block
  uint64_t v_offset = 0;     // from a layer's start to its V part
  // Per-channel K formats: the f16 keys of partly filled groups (quant/key_tails.h), owned by the
  // pool's storage; null elsewhere (a partly filled group is then re-sealed from its bytes).
  KeyTails* key_tails = nullptr;
  // `--kv-recent-window`: each running sequence's newest positions in f16 (quant/recent_window.h),
  // owned by the engine's model runner; null without a window.
  RecentWindow* recent = nullptr;

  // Start of [block_size][k_vector_bytes] for (block, layer, head).
  [[nodiscard]] uint8_t* k_head(uint64_t block, uint32_t layer, uint32_t head) const {
    return base + block * block_bytes + layer * layer_bytes + head * block_size * k_vector_bytes;
  }
  [[nodiscard]] uint8_t* v_head(uint64_t block, uint32_t layer, uint32_t head) const {
    return base + block * block_bytes + layer * layer_bytes + v_offset +
           head * block_size * v_vector_bytes;
  }
};

}  // namespace kvs
