// kv_geometry: THE bytes-per-token formula, used by the engine's pool, the metrics and
// `kvserve plan`:
//
//   KV bytes per token = layers x 2 x kv_heads x head_dim x bytes_per_element
//
// generalised per layer: a layer stores kv_heads vectors of K (head_dim_k elements) and of V
// (head_dim_v elements) per token, each in its KvDtype with its scale bytes (kv_format.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvcache/kv_format.h"

namespace kvs {

// The uniform case every llama-style model is: all layers alike, full attention.
struct KvUniformShape {
  uint32_t layers = 0;
  uint32_t kv_heads = 0;
  uint32_t head_dim_k = 0;
  uint32_t head_dim_v = 0;
  KvDtype k_dtype = KvDtype::kF16;
  KvDtype v_dtype = KvDtype::kF16;
};

struct KvTokenBytes {
  uint64_t k_bytes_per_layer = 0;  // kv_heads x kv_vector_bytes(k_dtype, head_dim_k)
  uint64_t v_bytes_per_layer = 0;
  uint64_t bytes_per_token = 0;    // layers x (k + v)
  // "30 x 2 x 3 x 64 x 2 = 23,040 B" (or the K/V split when K and V differ).
  std::string formula;
};

[[nodiscard]] KvTokenBytes kv_token_bytes(const KvUniformShape& shape);

}  // namespace kvs
