#include "kvcache/kv_block_storage.h"

#include <cstdlib>
#include <cstring>
#include <string>

namespace kvs {

void KvBlockStorage::FreeDeleter::operator()(uint8_t* p) const { std::free(p); }

Result<KvBlockStorage> KvBlockStorage::create(const KvStorageShape& s) {
  if (s.num_blocks == 0) return invalid_argument("the KV pool needs at least one block");
  if (s.block_size < 1 || s.block_size > 256)
    return invalid_argument("block size must be between 1 and 256 tokens, got " +
                            std::to_string(s.block_size));
  if (s.layers == 0 || s.kv_heads == 0) return invalid_argument("model has no KV heads");
  KVS_ASSIGN_OR_RETURN(uint64_t kvec, kv_vector_bytes_checked(s.k_dtype, s.head_dim));
  KVS_ASSIGN_OR_RETURN(uint64_t vvec, kv_vector_bytes_checked(s.v_dtype, s.head_dim));
  KvBlockStorage st;
  st.shape_ = s;
  PagedKvLayout& l = st.layout_;
  l.block_size = s.block_size;
  l.kv_heads = s.kv_heads;
  l.head_dim = s.head_dim;
  l.k_dtype = s.k_dtype;
  l.v_dtype = s.v_dtype;
  l.k_vector_bytes = kvec;
  l.v_vector_bytes = vvec;
  l.v_offset = uint64_t{s.kv_heads} * s.block_size * kvec;
  l.layer_bytes = l.v_offset + uint64_t{s.kv_heads} * s.block_size * vvec;
  l.block_bytes = l.layer_bytes * s.layers;
  const unsigned __int128 total = static_cast<unsigned __int128>(l.block_bytes) * s.num_blocks;
  if (total > (uint64_t{1} << 46)) return invalid_argument("KV pool size is absurdly large");
  const uint64_t bytes = (static_cast<uint64_t>(total) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, bytes);
  if (p == nullptr)
    return resource_exhausted("could not allocate " + std::to_string(bytes) +
                              " bytes for the KV pool");
  std::memset(p, 0, bytes);
  st.memory_.reset(static_cast<uint8_t*>(p));
  l.base = st.memory_.get();
  return st;
}

void KvBlockStorage::copy_tokens(uint32_t src, uint32_t dst, uint32_t num_tokens) {
  KVS_CHECK(src < shape_.num_blocks && dst < shape_.num_blocks);
  KVS_CHECK(num_tokens <= shape_.block_size);
  if (src == dst || num_tokens == 0) return;
  const PagedKvLayout& l = layout_;
  if (num_tokens == shape_.block_size) {
    std::memcpy(l.base + dst * l.block_bytes, l.base + src * l.block_bytes, l.block_bytes);
    return;
  }
  for (uint32_t layer = 0; layer < shape_.layers; ++layer) {
    for (uint32_t h = 0; h < shape_.kv_heads; ++h) {
      std::memcpy(l.k_head(dst, layer, h), l.k_head(src, layer, h), num_tokens * l.k_vector_bytes);
      std::memcpy(l.v_head(dst, layer, h), l.v_head(src, layer, h), num_tokens * l.v_vector_bytes);
    }
  }
}

void KvBlockStorage::read_block(uint32_t block, uint8_t* dst) const {
  KVS_CHECK(block < shape_.num_blocks);
  std::memcpy(dst, layout_.base + block * layout_.block_bytes, layout_.block_bytes);
}

void KvBlockStorage::write_block(uint32_t block, const uint8_t* src) {
  KVS_CHECK(block < shape_.num_blocks);
  std::memcpy(layout_.base + block * layout_.block_bytes, src, layout_.block_bytes);
}

}  // namespace kvs
