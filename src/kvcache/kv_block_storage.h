// KvBlockStorage: the bytes of the paged KV pool. The cache manager decides which block holds
// which tokens; this class only owns the memory and knows where a (block, layer, head) lives.
//
// Layout (one block is one contiguous region, so copy-on-write, swap and offload move a block
// with one memcpy):
//   // [num_blocks][layers][K: kv_heads][block_size][k_vector_bytes]
//   //                     [V: kv_heads][block_size][v_vector_bytes]
// A vector is one head's K (or V) for one token in its KvDtype, scales included (kv_format.h),
// so block_bytes == block_size * kv_token_bytes(...).bytes_per_token exactly.
#pragma once

#include <cstdint>
#include <memory>

#include "core/status.h"
#include "kvcache/kv_format.h"

namespace kvs {

struct KvStorageShape {
  uint32_t num_blocks = 0;
  uint32_t block_size = 16;
  uint32_t layers = 0;
  uint32_t kv_heads = 0;
  uint32_t head_dim = 0;
  KvDtype k_dtype = KvDtype::kF16;
  KvDtype v_dtype = KvDtype::kF16;
};

// Plain strides handed to the attention kernels (which never see the storage class).
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

  // Start of [block_size][k_vector_bytes] for (block, layer, head).
  [[nodiscard]] uint8_t* k_head(uint64_t block, uint32_t layer, uint32_t head) const {
    return base + block * block_bytes + layer * layer_bytes + head * block_size * k_vector_bytes;
  }
  [[nodiscard]] uint8_t* v_head(uint64_t block, uint32_t layer, uint32_t head) const {
    return base + block * block_bytes + layer * layer_bytes + v_offset +
           head * block_size * v_vector_bytes;
  }
};

class KvBlockStorage {
 public:
  // Validates the shape (head_dim fits the formats, sizes do not overflow) and allocates
  // num_blocks * block_bytes, zero-filled, 64-byte aligned.
  static Result<KvBlockStorage> create(const KvStorageShape& shape);

  [[nodiscard]] const KvStorageShape& shape() const { return shape_; }
  [[nodiscard]] const PagedKvLayout& layout() const { return layout_; }
  [[nodiscard]] uint64_t block_bytes() const { return layout_.block_bytes; }
  [[nodiscard]] uint64_t total_bytes() const { return layout_.block_bytes * shape_.num_blocks; }

  // Copies token slots [0, num_tokens) of every layer and head from block src into block dst
  // (copy-on-write of a shared partial block). num_tokens <= block_size.
  void copy_tokens(uint32_t src_block, uint32_t dst_block, uint32_t num_tokens);
  // Whole-block copies to and from host memory (swap, offload): block_bytes bytes.
  void read_block(uint32_t block, uint8_t* dst) const;
  void write_block(uint32_t block, const uint8_t* src);

 private:
  struct FreeDeleter {
    void operator()(uint8_t* p) const;
  };
  KvStorageShape shape_;
  PagedKvLayout layout_;
  std::unique_ptr<uint8_t, FreeDeleter> memory_;
};

}  // namespace kvs
