// param_estimate: a model's parameter count from its config.json shapes, for the weights line
// when neither the catalog nor the user gives one. It walks the layers the way layer_pattern.h
// reads them and adds, per layer, the mixer's and the feed-forward block's matrices:
//
//   attention    q, k, v, o: hidden x heads x head_dim x 2 + hidden x kv_heads x head_dim x 2
//                (also for Gemma 3n's KV-shared layers: they keep their own projections)
//   MLA          q (direct or through q_lora_rank), kv_a, kv_b, o (DeepSeek's shapes)
//   Mamba1       in_proj, conv1d, x_proj, dt_proj, A_log, D, out_proj (ssm_state.h's d_inner)
//   Mamba2       in_proj (2 d_inner + 2 n_groups d_state + heads), conv1d, dt_bias, A_log, D,
//                gated norm, out_proj; Falcon-H1 runs it beside attention in every layer
//   lightning    qkv, output gate, out_proj, norm (MiniMax-01)
//   gated delta  in_proj_qkvz, in_proj_ba, conv1d, A_log, dt_bias, norm, out_proj (Qwen3-Next)
//   MLP          gate/up/down (3 x hidden x intermediate), or up/down only for the GPT-2 /
//                Falcon / StarCoder / Nemotron (relu2) families; intermediate_size may be a list
//   MoE          experts x MLP(expert size) + router + shared experts, on the layers the config
//                makes MoE: Jamba expert_layer_period / expert_layer_offset, Llama 4
//                interleave_moe_layer_step (moe_layers) with intermediate_size_mlp on the dense
//                ones and one shared expert, DeepSeek first_k_dense_replace / moe_layer_freq,
//                Qwen MoE decoder_sparse_step / mlp_only_layers, Nemotron-H 'E' ('-' is a plain
//                MLP, 'M' and '*' have none); shared experts from n_shared_experts,
//                shared_expert_intermediate_size, moe_shared_expert_intermediate_size or
//                shared_intermediate_size
//
// plus the token embeddings (twice unless tie_word_embeddings), learned positions (GPT-2 /
// GPT-BigCode), Gemma 3n's per-layer embeddings, LAuReL and AltUp projections, and the norms.
// Biases are left out (well under 0.1% for these models). Multimodal checkpoints count their
// language model only (text_config): vision and audio encoders are not in these shapes.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "planner/layer_role.h"

namespace kvs {

struct ParamShape {
  uint64_t hidden = 0;
  uint64_t heads = 0;
  uint64_t kv_heads = 0;
  uint64_t head_dim_k = 0, head_dim_v = 0;
  uint64_t num_experts = 0;  // routed experts (0 = dense)
};

// `c` is the config as model_config reads it (text_config merged, transformers defaults filled);
// `roles` has one entry per model layer (layer_pattern's roles; kMlaLatent for MLA models).
// Fields that are absent or malformed count as 0: this is an estimate, never an error.
[[nodiscard]] uint64_t estimate_parameters(const nlohmann::json& c,
                                           const std::vector<LayerRole>& roles,
                                           const ParamShape& shape);

}  // namespace kvs
