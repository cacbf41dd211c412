// ModelSpec: the numbers that define a transformer's shape (layers, heads, KV heads, head dim,
// RoPE, norms), read from GGUF metadata. The KV cache sizes itself from kv_shape().
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "kvcache/kv_geometry.h"

namespace kvs {

class GgufFile;

struct ModelSpec {
  std::string architecture;  // "llama"
  std::string name;          // general.name, if present
  uint32_t n_layers = 0;
  uint32_t d_model = 0;  // embedding length
  uint32_t n_heads = 0;
  uint32_t n_kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t ffn_dim = 0;
  uint32_t vocab_size = 0;
  uint32_t context_length = 0;  // trained context
  float rope_freq_base = 10000.0f;
  uint32_t rope_dim = 0;
  float norm_eps = 1e-5f;

  [[nodiscard]] KvUniformShape kv_shape(KvDtype k, KvDtype v) const {
    return {.layers = n_layers,
            .kv_heads = n_kv_heads,
            .head_dim_k = head_dim,
            .head_dim_v = head_dim,
            .k_dtype = k,
            .v_dtype = v};
  }
};

// Reads and validates the shape of a llama-architecture GGUF (errors name the missing or
// inconsistent key).
[[nodiscard]] Result<ModelSpec> model_spec_from_gguf(const GgufFile& file);

}  // namespace kvs
