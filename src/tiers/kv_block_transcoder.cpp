#include "tiers/kv_block_transcoder.h"

#include <vector>

#include "kernels/kv_vector.h"
#include "quant/kv_channel_groups.h"

namespace kvs {

Result<KvBlockTranscoder> KvBlockTranscoder::create(const KvStorageShape& pool, KvDtype tier_k,
                                                    KvDtype tier_v) {
  KvBlockTranscoder t;
  t.layers_ = pool.layers;
  KVS_ASSIGN_OR_RETURN(t.pool_, KvBlockStorage::layout_of(pool));
  KvStorageShape tier = pool;
  tier.k_dtype = tier_k;
  tier.v_dtype = tier_v;
  tier.layer_formats = {};  // the tier's blocks are in one format, whatever the pool's layers
  Result<PagedKvLayout> l = KvBlockStorage::layout_of(tier);
  if (!l.is_ok())
    return invalid_argument(std::string("--kv-offload-dtype ") + kv_dtype_name(tier_k) + ": " +
                            l.status().message());
  t.tier_ = *l;
  return t;
}

void KvBlockTranscoder::convert(const PagedKvLayout& from_layout, const uint8_t* src,
                                const PagedKvLayout& to_layout, uint8_t* dst) const {
  const uint32_t D = from_layout.head_dim, bs = from_layout.block_size;
  std::vector<float> x(D), keys(uint64_t{bs} * D);
  for (uint32_t layer = 0; layer < layers_; ++layer) {
    // Each layer in its own formats (per-layer formats, paged_kv_layout.h's layer_view).
    const PagedKvLayout from = from_layout.layer_view(layer), to = to_layout.layer_view(layer);
    const ChannelBits from_bits = channel_bits(from.k_dtype), to_bits = channel_bits(to.k_dtype);
    const uint32_t from_g = kv_channel_group_tokens(from.k_dtype),
                   to_g = kv_channel_group_tokens(to.k_dtype);
    for (uint32_t h = 0; h < from.kv_heads; ++h) {
      // The offsets of (layer, head) within one block.
      const uint64_t fk = from.k_head_offset(layer, h), fv = from.v_head_offset(layer, h);
      const uint64_t tk = to.k_head_offset(layer, h), tv = to.v_head_offset(layer, h);
      // Keys: a per-channel format is decoded and encoded a group at a time.
      for (uint32_t t = 0; t < bs; ++t) {
        float* k = keys.data() + uint64_t{t} * D;
        if (from_bits.bits == 0) {
          kv_vector_to_f32(from.k_dtype, src + fk + t * from.k_vector_bytes, D, k, 0);
        } else {
          dequantize_channel_row(
              from_bits, src + fk + (t / from_g) * channel_group_bytes(from_bits, from_g, D),
              t % from_g, D, k);
        }
        if (to_bits.bits == 0)
          kv_vector_from_f32(to.k_dtype, k, D, dst + tk + t * to.k_vector_bytes);
      }
      if (to_bits.bits != 0)
        for (uint32_t g = 0; g < bs / to_g; ++g)
          quantize_channel_group(to_bits, keys.data() + uint64_t{g} * to_g * D, D, to_g, D,
                                 dst + tk + g * channel_group_bytes(to_bits, to_g, D));
      for (uint32_t t = 0; t < bs; ++t) {
        kv_vector_to_f32(from.v_dtype, src + fv + t * from.v_vector_bytes, D, x.data(), 0);
        kv_vector_from_f32(to.v_dtype, x.data(), D, dst + tv + t * to.v_vector_bytes);
      }
    }
  }
}

void KvBlockTranscoder::encode(const uint8_t* pool_block, uint8_t* tier_block) const {
  convert(pool_, pool_block, tier_, tier_block);
}

void KvBlockTranscoder::decode(const uint8_t* tier_block, uint8_t* pool_block) const {
  convert(tier_, tier_block, pool_, pool_block);
}

}  // namespace kvs
