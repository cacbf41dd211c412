#include "kvcache/kv_block_storage.h"

#include <cstring>
#include <memory>
#include <string>

#include "kvcache/kv_geometry.h"
#include "kvcache/kv_pool_plan.h"
#include "quant/kv_channel_groups.h"

namespace kvs {

Result<KvBlockStorage> KvBlockStorage::create(const KvStorageShape& s) {
  if (s.num_blocks == 0) return invalid_argument("the KV pool needs at least one block");
  KvBlockStorage st;
  st.shape_ = s;
  KVS_ASSIGN_OR_RETURN(st.layout_, layout_of(s));
  const PagedKvLayout& l = st.layout_;
  const unsigned __int128 total = static_cast<unsigned __int128>(l.block_bytes) * s.num_blocks;
  if (total > (uint64_t{1} << 46)) return invalid_argument("KV pool size is absurdly large");
  // Zero pages, committed only when first written, so a large pool or host area costs memory as
  // it fills rather than at startup.
  KVS_ASSIGN_OR_RETURN(st.memory_, ZeroPages::map(static_cast<uint64_t>(total), "the KV pool"));
  st.layout_.base = st.memory_.data();
  if (kv_dtype_per_channel(s.k_dtype)) {  // slots may be 0: the own-group rows still count
    KVS_ASSIGN_OR_RETURN(
        KeyTails tails,
        KeyTails::create(
            s.key_tail_slots, s.layers, s.kv_heads, s.head_dim, kv_channel_group_tokens(s.k_dtype),
            uint64_t{s.num_blocks} * (s.block_size / kv_channel_group_tokens(s.k_dtype))));
    st.key_tails_ = std::make_unique<KeyTails>(std::move(tails));
    st.layout_.key_tails = st.key_tails_.get();
  }
  return st;
}

Result<PagedKvLayout> KvBlockStorage::layout_of(const KvStorageShape& s) {
  if (s.block_size < 1 || s.block_size > kMaxBlockSize)
    return invalid_argument("block size must be between 1 and " + std::to_string(kMaxBlockSize) +
                            " tokens, got " + std::to_string(s.block_size));
  if (s.layers == 0 || s.kv_heads == 0) return invalid_argument("model has no KV heads");
  const uint32_t group = kv_channel_group_tokens(s.k_dtype);
  if (group != 0 && s.block_size % group != 0)
    return invalid_argument(std::string("KV format ") + kv_dtype_name(s.k_dtype) +
                            " quantizes keys in groups of " + std::to_string(group) +
                            " tokens and needs a block size that is a multiple of " +
                            std::to_string(group) + ", got " + std::to_string(s.block_size));
  const KvUniformShape shape = s.uniform();
  KVS_RETURN_IF_ERROR(validate_kv_shape(KvModelShape::uniform(shape)));
  // The byte counts come from the one formula (kv_geometry); the layout only orders them.
  const KvTokenBytes tb = kv_token_bytes(shape);
  PagedKvLayout l;
  l.block_size = s.block_size;
  l.kv_heads = s.kv_heads;
  l.head_dim = s.head_dim;
  l.k_dtype = s.k_dtype;
  l.v_dtype = s.v_dtype;
  l.k_vector_bytes = tb.k_bytes_per_layer / s.kv_heads;
  l.v_vector_bytes = tb.v_bytes_per_layer / s.kv_heads;
  l.v_offset = uint64_t{s.block_size} * tb.k_bytes_per_layer;
  l.layer_bytes = uint64_t{s.block_size} * (tb.k_bytes_per_layer + tb.v_bytes_per_layer);
  l.block_bytes = uint64_t{s.block_size} * tb.bytes_per_token;
  if (s.layer_formats.empty()) {
    KVS_CHECK(l.block_bytes == l.layer_bytes * s.layers);
    return l;
  }
  // Per-layer formats: each layer's K heads then V heads, in its own formats, layer after layer.
  auto slices = std::make_shared<std::vector<PagedKvLayerSlice>>(s.layers);
  uint64_t offset = 0;
  for (uint32_t layer = 0; layer < s.layers; ++layer) {
    PagedKvLayerSlice& sl = (*slices)[layer];
    sl.offset = offset;
    sl.k_dtype = s.layer_formats.k_at(layer, s.k_dtype);
    sl.v_dtype = s.layer_formats.v_at(layer, s.v_dtype);
    sl.k_vector_bytes = kv_vector_bytes(sl.k_dtype, s.head_dim);
    sl.v_vector_bytes = kv_vector_bytes(sl.v_dtype, s.head_dim);
    sl.v_offset = uint64_t{s.block_size} * s.kv_heads * sl.k_vector_bytes;
    offset += sl.v_offset + uint64_t{s.block_size} * s.kv_heads * sl.v_vector_bytes;
  }
  KVS_CHECK(offset == l.block_bytes);
  l.layer_bytes = 0;
  l.layers = std::move(slices);
  // The top-level fields describe layer 0 (its view); other layers are reached through
  // layer_view.
  return l.layer_view(0);
}

void KvBlockStorage::copy_tokens(uint32_t src, uint32_t dst, uint32_t num_tokens) {
  KVS_CHECK(src < shape_.num_blocks && dst < shape_.num_blocks);
  KVS_CHECK(num_tokens <= shape_.block_size);
  if (src == dst || num_tokens == 0) return;
  invalidate_tails(dst);
  const PagedKvLayout& l = layout_;
  // Per-channel keys: whole groups (their parameters cover the group's rows together).
  const uint64_t group = kv_channel_group_tokens(shape_.k_dtype);
  const uint64_t k_tokens = group != 0 ? (num_tokens + group - 1) / group * group : num_tokens;
  if (key_tails_) {  // the copied groups' f16 tails go with them (key_tails.h: copy)
    const uint64_t per_block = shape_.block_size / group;
    for (uint64_t g = 0; g < k_tokens / group; ++g)
      key_tails_->copy(uint64_t{src} * per_block + g, uint64_t{dst} * per_block + g);
  }
  if (num_tokens == shape_.block_size) {
    std::memcpy(l.base + dst * l.block_bytes, l.base + src * l.block_bytes, l.block_bytes);
    return;
  }
  for (uint32_t layer = 0; layer < shape_.layers; ++layer) {
    const PagedKvLayout v = l.layer_view(layer);
    for (uint32_t h = 0; h < shape_.kv_heads; ++h) {
      std::memcpy(v.k_head(dst, layer, h), v.k_head(src, layer, h), k_tokens * v.k_vector_bytes);
      std::memcpy(v.v_head(dst, layer, h), v.v_head(src, layer, h), num_tokens * v.v_vector_bytes);
    }
  }
}

void KvBlockStorage::copy_block_to(uint32_t block, KvBlockStorage& other, uint32_t dst) const {
  KVS_CHECK(block < shape_.num_blocks && dst < other.shape_.num_blocks);
  KVS_CHECK_MSG(other.layout_.block_bytes == layout_.block_bytes,
                "copy_block_to between storages of different layouts");
  other.invalidate_tails(dst);
  std::memcpy(other.layout_.base + uint64_t{dst} * layout_.block_bytes,
              layout_.base + uint64_t{block} * layout_.block_bytes, layout_.block_bytes);
}

const uint8_t* KvBlockStorage::block_data(uint32_t block) const {
  KVS_CHECK(block < shape_.num_blocks);
  return layout_.base + uint64_t{block} * layout_.block_bytes;
}

uint8_t* KvBlockStorage::mutable_block_data(uint32_t block) {
  KVS_CHECK(block < shape_.num_blocks);
  invalidate_tails(block);
  return layout_.base + uint64_t{block} * layout_.block_bytes;
}

void KvBlockStorage::write_block(uint32_t block, const uint8_t* bytes) {
  KVS_CHECK(block < shape_.num_blocks);
  invalidate_tails(block);
  std::memcpy(layout_.base + uint64_t{block} * layout_.block_bytes, bytes, layout_.block_bytes);
}

void KvBlockStorage::invalidate_tails(uint32_t block) {
  if (!key_tails_) return;
  const uint64_t per_block = shape_.block_size / key_tails_->tokens();
  key_tails_->invalidate(uint64_t{block} * per_block, uint64_t{block + 1} * per_block);
}

}  // namespace kvs
