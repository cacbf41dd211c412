// KvBlockTranscoder: re-encodes one KV block between the pool's element format and a tier's
// (demotion, --kv-offload-dtype): every K and V head vector is converted to f32 and stored in
// the other format with the scalar codecs (kernels/kv_vector.h). A rotated format (int4_had)
// stores the rotated vector and converts back from it, so both sides are always the model's
// own K and V. Per-channel keys (quant/kv_channel_groups.h) are decoded and encoded a 16-token
// group at a time. The layouts are those of the paged pool (quant/paged_kv_layout.h), one block;
// a pool with per-layer formats (quant/kv_layer_formats.h) is converted layer by layer from each
// layer's formats, and the tier's blocks hold every layer in the tier's format.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "kvcache/kv_block_storage.h"
#include "quant/paged_kv_layout.h"

namespace kvs {

class KvBlockTranscoder {
 public:
  // `pool` is the pool's storage shape; the tier stores K in tier_k and V in tier_v.
  static Result<KvBlockTranscoder> create(const KvStorageShape& pool, KvDtype tier_k,
                                          KvDtype tier_v);

  [[nodiscard]] uint64_t pool_block_bytes() const { return pool_.block_bytes; }
  [[nodiscard]] uint64_t tier_block_bytes() const { return tier_.block_bytes; }
  // pool_block_bytes() -> tier_block_bytes() and back.
  void encode(const uint8_t* pool_block, uint8_t* tier_block) const;
  void decode(const uint8_t* tier_block, uint8_t* pool_block) const;

 private:
  void convert(const PagedKvLayout& from, const uint8_t* src, const PagedKvLayout& to,
               uint8_t* dst) const;
  uint32_t layers_ = 0;
  PagedKvLayout pool_, tier_;
};

}  // namespace kvs
