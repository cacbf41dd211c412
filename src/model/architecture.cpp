#include "model/architecture.h"

#include <cmath>

namespace kvs {

Result<Architecture> architecture_of(const ModelSpec& s) {
  Architecture a;
  a.name = s.architecture;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  a.attention_scale = scale;
  for (const KvLayer& l : s.kv_layers) {
    const bool sliding = l.kind == KvLayerKind::kSliding;
    a.layers.push_back({.rope_base = sliding ? s.rope_freq_base_swa : s.rope_freq_base,
                        .window = sliding ? l.window : 0});
  }
  if (s.architecture == "llama") return a;
  if (s.architecture == "gemma3") {
    a.ffn = FfnKind::kGeGluTanh;
    a.rope_mode = RopeMode::kNeox;
    a.qk_norm = true;
    a.post_norms = true;
    // In f32, as transformers multiplies the embedding (and llama.cpp scales it).
    a.embedding_scale = std::sqrt(static_cast<float>(s.d_model));
    // scores = q . k / sqrt(query_pre_attn_scalar), which is head_dim for Gemma 3 270M, 1B, 4B
    // and 12B (transformers' config; the GGUF has no key for it, llama.cpp uses head_dim).
    a.attention_scale = 1.0f / std::sqrt(static_cast<float>(s.query_pre_attn_scalar));
    a.final_logit_softcap = s.final_logit_softcap;
    return a;
  }
  return unimplemented("model architecture '" + s.architecture + "' is not supported");
}

}  // namespace kvs
