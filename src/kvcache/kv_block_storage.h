// KvBlockStorage: the bytes of the paged KV pool. The cache manager decides which block holds
// which tokens; this class only owns the memory and knows where a (block, layer, head) lives.
//
// Layout (quant/paged_kv_layout.h; one block is one contiguous region, so copy-on-write, swap and
// offload move a block with one memcpy):
//   // [num_blocks][layers][K: kv_heads][block_size][k_vector_bytes]
//   //                     [V: kv_heads][block_size][v_vector_bytes]
// The byte counts are kv_geometry's (kv_token_bytes), so block_bytes == block_size x
// bytes_per_token exactly; how many blocks a memory budget buys is kv_pool_plan's answer. With
// per-layer formats each layer's part has its own size, in layer order (PagedKvLayout::layers).
#pragma once

#include <cstdint>
#include <memory>

#include "core/status.h"
#include "core/zero_pages.h"
#include "kvcache/kv_geometry.h"
#include "kvcache/kv_pool_plan.h"
#include "quant/key_tails.h"
#include "quant/kv_format.h"
#include "quant/paged_kv_layout.h"

namespace kvs {

struct KvStorageShape {
  uint32_t num_blocks = 0;
  uint32_t block_size = 16;
  uint32_t layers = 0;
  uint32_t kv_heads = 0;
  uint32_t head_dim = 0;
  KvDtype k_dtype = KvDtype::kF16;
  KvDtype v_dtype = KvDtype::kF16;
  // Per-channel K formats: slots of f16 keys for partly filled groups (quant/key_tails.h);
  // ignored for other formats. Their bytes are kv_pool_plan's key_tail_bytes.
  uint32_t key_tail_slots = 0;
  // Layers whose K or V has its own format (quant/kv_layer_formats.h): the layout then gives each
  // layer its slice of a block (PagedKvLayout::layers).
  KvLayerFormats layer_formats;

  [[nodiscard]] KvUniformShape uniform() const {
    return {.layers = layers,
            .kv_heads = kv_heads,
            .head_dim_k = head_dim,
            .head_dim_v = head_dim,
            .k_dtype = k_dtype,
            .v_dtype = v_dtype,
            .layer_formats = layer_formats};
  }
  // The storage for a planned pool: its blocks, block size, and one group's layers per block.
  [[nodiscard]] static KvStorageShape of(const KvPoolPlan& plan) {
    return {.num_blocks = plan.num_blocks,
            .block_size = plan.block_size,
            .layers = plan.unit.layers,
            .kv_heads = plan.unit.kv_heads,
            .head_dim = plan.unit.head_dim_k,
            .k_dtype = plan.unit.k_dtype,
            .v_dtype = plan.unit.v_dtype,
            .key_tail_slots = plan.key_tail_slots,
            .layer_formats = plan.unit.layer_formats};
  }
};

class KvBlockStorage {
 public:
  // Validates the shape (head_dim fits the formats, sizes do not overflow) and maps
  // num_blocks * block_bytes of zeroed, page-aligned memory.
  static Result<KvBlockStorage> create(const KvStorageShape& shape);
  // The strides of a storage of this shape (base = null: add a block's address to use them on
  // bytes laid out like one block of it). Validates the shape as create() does.
  static Result<PagedKvLayout> layout_of(const KvStorageShape& shape);

  [[nodiscard]] const KvStorageShape& shape() const { return shape_; }
  // The per-channel keys' tails (null for other formats).
  [[nodiscard]] const KeyTails* key_tails() const { return key_tails_.get(); }
  [[nodiscard]] const PagedKvLayout& layout() const { return layout_; }
  [[nodiscard]] uint64_t block_bytes() const { return layout_.block_bytes; }
  [[nodiscard]] uint64_t total_bytes() const { return layout_.block_bytes * shape_.num_blocks; }

  // Copies token slots [0, num_tokens) of every layer and head from block src into block dst
  // (copy-on-write of a shared partial block). num_tokens <= block_size. Per-channel keys are
  // copied by whole groups (a group's parameters cover its rows together).
  void copy_tokens(uint32_t src_block, uint32_t dst_block, uint32_t num_tokens);
  // Copies one whole block (block_bytes bytes) into block `dst` of `other`, which must have the
  // same layout (swap between the device pool and the host area).
  void copy_block_to(uint32_t block, KvBlockStorage& other, uint32_t dst) const;
  // The bytes of one block (block_bytes of them).
  [[nodiscard]] const uint8_t* block_data(uint32_t block) const;
  // Overwrites one whole block with block_bytes bytes (a block loaded from the disk tier).
  void write_block(uint32_t block, const uint8_t* bytes);
  // The bytes of one block, writable (the tiers pack their own entries into host blocks).
  [[nodiscard]] uint8_t* mutable_block_data(uint32_t block);

 private:
  KvStorageShape shape_;
  PagedKvLayout layout_;
  // A block overwritten other than by write_kv: its groups' tails no longer match it.
  void invalidate_tails(uint32_t block);

  ZeroPages memory_;
  std::unique_ptr<KeyTails> key_tails_;
};

}  // namespace kvs
