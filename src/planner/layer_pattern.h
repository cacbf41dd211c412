// layer_pattern: which layer of a config.json model is which. Every dialect the planner reads,
// first rule that applies (MLA configs, kv_lora_rank, are decided before this):
//
//   layer_types [..]               per layer: full_attention / attention, sliding_attention,
//                                  chunked_attention, linear_attention (gated delta net),
//                                  mamba (Granite 4.0-H: Mamba2 when mamba_n_heads is set, else
//                                  Mamba1)
//   hybrid_override_pattern "M-*E" Nemotron-H: M Mamba2, * attention, - MLP, E MoE (no KV, no
//   state) attn_layer_period p, attn_layer_offset o
//                                  Jamba: layer i attention when i % p == o, else Mamba1
//   attn_type_list [0/1]           MiniMax-01: 1 softmax attention, 0 lightning attention
//   model_type falcon_h1           every layer attention and Mamba2 side by side
//   full_attention_interval k      Qwen3-Next: layer i full when (i + 1) % k == 0, else linear
//   attention_chunk_size c         Llama 4 without layer_types: a NoPE layer attends globally, the
//                                  others in chunks of c; no_rope_layers (1 = RoPE) says which,
//                                  or, empty, every no_rope_layer_interval-th (default 4) is NoPE
//   sliding_window_pattern p       Gemma 3: layer i full when (i + 1) % p == 0, else windowed
//   model_type gemma2              even layers windowed
//   max_window_layers m            Qwen2/3: windowed when use_sliding_window and i >= m
//   sliding_window < trained context (use_sliding_window not false): every layer windowed
//   otherwise                      every layer full attention
// and then num_kv_shared_layers k (Gemma 3n): the last k layers reuse earlier layers' KV.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "planner/layer_role.h"

namespace kvs {

struct LayerPattern {
  std::vector<LayerRole> roles;  // one per model layer; kMamba2Parallel = attention + Mamba2
  uint32_t window = 0;           // of kSlidingWindow layers
  uint32_t chunk = 0;            // of kChunkedAttention layers (attention_chunk_size)
  std::string rule;              // the key that decided, for the report's notes ("" = plain)
};

// `c` is the config (text_config merged, transformers defaults filled); n_layers its layer count
// and max_context its max_position_embeddings (0 = unknown).
[[nodiscard]] Result<LayerPattern> layer_pattern(const nlohmann::json& c, uint64_t n_layers,
                                                 uint32_t max_context);

}  // namespace kvs
