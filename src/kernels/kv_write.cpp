#include "kernels/kv_write.h"

#include "kernels/kv_vector.h"

namespace kvs {

void write_kv(const PagedKvLayout& kv, uint32_t layer, int64_t num_tokens,
              const int64_t* slot_mapping, const float* k, const float* v) {
  const uint32_t D = kv.head_dim;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const uint64_t slot = static_cast<uint64_t>(slot_mapping[t]);
    const uint64_t block = slot / kv.block_size;
    const uint64_t off = slot % kv.block_size;
    for (uint32_t h = 0; h < kv.kv_heads; ++h) {
      const float* ks = k + (t * kv.kv_heads + h) * D;
      const float* vs = v + (t * kv.kv_heads + h) * D;
      kv_vector_from_f32(kv.k_dtype, ks, D, kv.k_head(block, layer, h) + off * kv.k_vector_bytes);
      kv_vector_from_f32(kv.v_dtype, vs, D, kv.v_head(block, layer, h) + off * kv.v_vector_bytes);
    }
  }
}

}  // namespace kvs
