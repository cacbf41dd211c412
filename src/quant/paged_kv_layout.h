// PagedKvLayout: where one (block, layer, KV head) lives in a paged KV pool, as plain strides.
// kvcache's KvBlockStorage owns the bytes and fills this in; the kernels (kv_write, paged
// attention) read and write through it and see nothing else of the cache.
//
//   // [num_blocks][layers][K: kv_heads][block_size][k_vector_bytes]
//   //                     [V: kv_heads][block_size][v_vector_bytes]
// A vector is one head's K (or V) for one token in its KvDtype, scales included (kv_format.h).
//
// With per-layer formats (quant/kv_layer_formats.h) each layer's part of a block has its own
// formats and size: `layers` lists where each starts and how it is laid out, and layer_view(l)
// gives the strides of layer l, which is what the kernels read (they take one layer at a time).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "quant/kv_format.h"

namespace kvs {

class KeyTails;
class RecentWindow;

// One layer's part of a block when layers differ in format.
struct PagedKvLayerSlice {
  uint64_t offset = 0;  // from the block's start
  KvDtype k_dtype = KvDtype::kF16;
  KvDtype v_dtype = KvDtype::kF16;
  uint64_t k_vector_bytes = 0;
  uint64_t v_vector_bytes = 0;
  uint64_t v_offset = 0;  // from the layer's start to its V part
};

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
  uint64_t layer_bytes = 0;  // one layer's K and V within a block (0 when `layers` is set)
  uint64_t v_offset = 0;     // from a layer's start to its V part
  // A layer view's (layer_view) offset of its layer from a block's start; 0 otherwise. With
  // layer_bytes 0 it makes the accessors below branch-free for every layout.
  uint64_t layer_base = 0;
  // Per-layer formats: every layer's slice (shared by the copies of a layout); null when all
  // layers are alike. The fields above then describe one layer: the view's (layer_view).
  std::shared_ptr<const std::vector<PagedKvLayerSlice>> layers;
  // Per-channel K formats: the f16 keys of partly filled groups (quant/key_tails.h), owned by the
  // pool's storage; null elsewhere (a partly filled group is then re-sealed from its bytes).
  KeyTails* key_tails = nullptr;
  // `--kv-recent-window`: each running sequence's newest positions in f16 (quant/recent_window.h),
  // owned by the engine's model runner; null without a window.
  RecentWindow* recent = nullptr;

  // Offset of `layer`'s part from a block's start. With per-layer formats only a view of that
  // layer (layer_view) knows it: call these on layer_view(layer).
  [[nodiscard]] uint64_t layer_offset(uint32_t layer) const {
    return layer_base + layer * layer_bytes;
  }
  // Offsets of (layer, head)'s K (V) rows from a block's start, in this layout's formats.
  [[nodiscard]] uint64_t k_head_offset(uint32_t layer, uint32_t head) const {
    return layer_offset(layer) + head * block_size * k_vector_bytes;
  }
  [[nodiscard]] uint64_t v_head_offset(uint32_t layer, uint32_t head) const {
    return layer_offset(layer) + v_offset + head * block_size * v_vector_bytes;
  }
  // Start of [block_size][k_vector_bytes] for (block, layer, head); as above, on layer_view(layer).
  [[nodiscard]] uint8_t* k_head(uint64_t block, uint32_t layer, uint32_t head) const {
    return base + block * block_bytes + k_head_offset(layer, head);
  }
  [[nodiscard]] uint8_t* v_head(uint64_t block, uint32_t layer, uint32_t head) const {
    return base + block * block_bytes + v_head_offset(layer, head);
  }
  // The strides of `layer`: this layout with its formats, vector sizes and V offset (itself when
  // all layers are alike). Per-channel keys keep the pool's tails (every layer's keys are grouped
  // alike, kv_layer_formats.h).
  [[nodiscard]] PagedKvLayout layer_view(uint32_t layer) const {
    if (!layers) return *this;
    PagedKvLayout v = *this;
    const PagedKvLayerSlice& s = (*layers)[layer];
    v.k_dtype = s.k_dtype;
    v.v_dtype = s.v_dtype;
    v.k_vector_bytes = s.k_vector_bytes;
    v.v_vector_bytes = s.v_vector_bytes;
    v.v_offset = s.v_offset;
    v.layer_base = s.offset;
    return v;
  }
};

}  // namespace kvs
