// Architecture: what distinguishes one transformer family's forward pass, as data. The forward
// pass (transformer_model.cpp) is one function over the shared kernels that reads this; adding
// an architecture means a new description here and its tensor names, not a new forward pass.
//
//   llama   RMSNorm -> attention (RoPE, GQA) -> residual -> RMSNorm -> SwiGLU MLP -> residual
//   gemma3  embeddings x sqrt(d_model); RMSNorm (the GGUF stores 1 + weight) -> attention with
//           RMSNorm over each q and k head before RoPE (NeoX pairs), a sliding window and RoPE
//           base of its own on the local layers -> RMSNorm -> residual -> RMSNorm -> GeGLU (tanh
//           GELU) -> RMSNorm -> residual; tied output; optional final logit soft-capping.
// Every number comes from the GGUF (model_spec.h); what a file leaves out takes the defaults
// transformers and llama.cpp use (documented at each field).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "kernels/rope.h"
#include "model/engine_architectures.h"
#include "model/model_spec.h"

namespace kvs {

enum class FfnKind : uint8_t { kSwiGlu, kGeGluTanh };

struct LayerAttention {
  float rope_base = 10000.0f;
  uint32_t window = 0;  // sliding window in tokens; 0 = full attention
};

struct Architecture {
  std::string name;
  FfnKind ffn = FfnKind::kSwiGlu;
  RopeMode rope_mode = RopeMode::kNormal;
  bool qk_norm = false;     // RMSNorm over each q and k head (tensors attn_q_norm / attn_k_norm)
  bool post_norms = false;  // RMSNorm of the attention and MLP outputs before the residual add
  float embedding_scale = 1.0f;
  float attention_scale = 1.0f;      // scores = scale * q . k
  float final_logit_softcap = 0.0f;  // logits = cap * tanh(logits / cap); 0 = none
  std::vector<LayerAttention> layers;
};

// The architecture of a shape check_engine_support accepted.
[[nodiscard]] Result<Architecture> architecture_of(const ModelSpec& spec);

}  // namespace kvs
