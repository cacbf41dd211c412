// ModelSpec: a transformer's shape as its GGUF metadata states it (llama.cpp's key names): the
// one reader of those keys, used by the engine (which runs the model) and by the planner (which
// only sizes its KV cache), so both read the same keys by the same rules.
//
//   <arch>.block_count, .embedding_length, .context_length, .feed_forward_length,
//   .attention.head_count / head_count_kv   scalar or one entry per layer; no head_count_kv
//                                           means MHA (KV heads = heads); a layer with 0 KV
//                                           heads holds no KV (a recurrent layer)
//   .attention.key_length / value_length    head dims (default embedding / heads)
//   .attention.sliding_window (+ .attention.sliding_window_pattern: a bool per layer, or a
//                              period p: layer i is full when (i + 1) % p == 0); without a
//                              pattern, llama.cpp's per-architecture layout
//                              (gguf_window_pattern.h: gemma2/3/3n, cohere2, gpt-oss, llama4
//                              chunks, olmo2, exaone4, phi3 none); other architectures window
//                              every layer
//   .attention.kv_lora_rank (+ .rope.dimension_count)      MLA latents (DeepSeek)
//   .full_attention_interval k (+ .ssm.*)   layer i full when (i + 1) % k == 0, else a
//                                           gated-delta-net state (Qwen3-Next)
//   .rope.freq_base, .rope.dimension_count, .attention.layer_norm_rms_epsilon, .expert_count
//
// kv_layers describes every layer for kv_geometry; the scalar fields are those of the first
// attention layer. Whether the engine can run the model is a separate question
// (check_engine_support).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "kvcache/kv_geometry.h"

namespace kvs {

class GgufFile;

struct ModelSpec {
  std::string architecture;  // general.architecture: "llama", "gemma3", ...
  std::string name;          // general.name, if present
  uint32_t n_layers = 0;
  uint32_t d_model = 0;     // embedding length
  uint32_t n_heads = 0;     // the largest head count of any layer
  uint32_t n_kv_heads = 0;  // of the first attention layer
  uint32_t head_dim = 0;    // K head dim (attention.key_length)
  uint32_t head_dim_v = 0;  // V head dim (attention.value_length)
  uint32_t ffn_dim = 0;     // 0 when the file does not say
  uint32_t vocab_size = 0;
  uint32_t context_length = 0;  // trained context (0 = not stated)
  uint32_t num_experts = 0;
  float rope_freq_base = 10000.0f;
  // RoPE base of the sliding-window layers (<arch>.rope.freq_base_swa): Gemma 3's local layers
  // use 10000 when the file does not say (transformers' rope_local_base_freq, llama.cpp's
  // default); other architectures use rope_freq_base.
  float rope_freq_base_swa = 10000.0f;
  uint32_t rope_dim = 0;
  float norm_eps = 1e-5f;
  // Attention scores are q . k / sqrt(query_pre_attn_scalar) (<arch>.attention.
  // query_pre_attn_scalar; head_dim when absent, as llama.cpp does for these models).
  uint32_t query_pre_attn_scalar = 0;
  float final_logit_softcap = 0;   // <arch>.final_logit_softcapping; 0 = none
  std::vector<KvLayer> kv_layers;  // one per layer
  // Layers from this index reuse earlier layers' KV and hold none (gemma3n; 0 = none), and
  // whether the windowed layers attend in chunks (llama4): gguf_window_pattern.h.
  uint32_t kv_shared_from = 0;
  bool window_chunked = false;

  // Every layer full attention with the same heads and K/V head dims: the shape kv_geometry's
  // uniform formula sizes.
  [[nodiscard]] bool uniform_full_attention() const;
  // Every layer, for kv_geometry and the pool plan (one rank).
  // `layers`: the layers whose K or V has its own format (quant/kv_layer_formats.h).
  [[nodiscard]] KvModelShape kv_model_shape(KvDtype k, KvDtype v,
                                            const KvLayerFormats& layers = {}) const {
    return KvModelShape{
        .layers = kv_layers, .k_dtype = k, .v_dtype = v, .layer_formats = layers, .tp = 1};
  }
  // Precondition: uniform_full_attention().
  [[nodiscard]] KvUniformShape kv_shape(KvDtype k, KvDtype v) const {
    return {.layers = n_layers,
            .kv_heads = n_kv_heads,
            .head_dim_k = head_dim,
            .head_dim_v = head_dim_v,
            .k_dtype = k,
            .v_dtype = v};
  }
};

// Reads and validates any architecture's shape (errors name the missing or inconsistent key).
[[nodiscard]] Result<ModelSpec> model_spec_from_gguf(const GgufFile& file);

// ok when the engine can run this shape (an architecture of engine_architectures(),
// architecture.h; full and sliding-window layers of equal heads): unimplemented naming what it
// cannot run otherwise.
[[nodiscard]] Status check_engine_support(const ModelSpec& spec);

}  // namespace kvs
