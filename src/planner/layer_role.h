// layer_role: what a layer of a model is, in the model's own terms, next to its KV geometry
// (kv_geometry's KvLayer, which only knows full / sliding / MLA / "no KV, a fixed state"). The
// report and --json name, per role, how many layers there are and what they hold, so a hybrid
// model's numbers explain themselves ("28 Mamba1 layers, 311,296 B of state each").
//
// A model layer maps to one geometry entry, except a layer that runs attention and an SSM side
// by side (Falcon-H1): its attention is one entry (kFullAttention) and its Mamba2 state another
// (kMamba2Parallel), so PlannerModel::layers can hold more entries than the model has layers.
#pragma once

#include <cstdint>
#include <vector>

#include "kvcache/kv_geometry.h"

namespace kvs {

enum class LayerRole : uint8_t {
  kFullAttention,     // holds every token
  kSlidingWindow,     // holds the last `window` tokens
  kChunkedAttention,  // attends within chunks of attention_chunk_size (Llama 4): at most a chunk
  kMlaLatent,         // DeepSeek's latent per token
  kLinearAttention,   // gated delta net (Qwen3-Next, Qwen3.5): conv window + recurrent state
  kMamba1,            // conv (d_conv-1) x d_inner + SSM d_inner x d_state (Jamba)
  kMamba2,          // conv (d_conv-1) x (d_inner + 2 n_groups d_state) + SSM heads x hdim x d_state
  kMamba2Parallel,  // the Mamba2 half of a layer that also runs attention (Falcon-H1)
  kLightning,       // lightning attention (MiniMax-01): heads x head_dim x head_dim per sequence
  kKvShared,        // reuses an earlier layer's KV (Gemma 3n's last num_kv_shared_layers): nothing
  kNoMixer,         // an MLP / MoE-only layer (Nemotron-H '-' and 'E'): nothing
  kRecurrent,       // a GGUF layer with no KV heads, or a catalog state given in bytes
};
inline constexpr int kNumLayerRoles = 12;

// "full attention", "Mamba2 (beside attention)", ... for the text report.
[[nodiscard]] const char* layer_role_name(LayerRole role);
// "full_attention", "mamba2_parallel", ... for --json.
[[nodiscard]] const char* layer_role_key(LayerRole role);
// The role a geometry entry has when nothing more is known (catalog and GGUF models).
[[nodiscard]] LayerRole default_layer_role(const KvLayer& layer);

// Per role: entries, bytes per token (one rank), fixed state per sequence (one rank) and what a
// request of n tokens holds in them (exact tokens; chunk_tokens as kv_layer_held_tokens).
struct LayerRoleBytes {
  LayerRole role = LayerRole::kFullAttention;
  uint32_t layers = 0;
  uint64_t bytes_per_token = 0;
  uint64_t state_bytes = 0;
  uint64_t request_bytes = 0;
};
// `roles` has one entry per shape.layers entry, or is empty (default_layer_role for each).
// Roles without layers are left out; the order is that of LayerRole.
[[nodiscard]] std::vector<LayerRoleBytes> layer_role_breakdown(const std::vector<LayerRole>& roles,
                                                               const KvModelShape& shape,
                                                               uint64_t n_tokens,
                                                               uint64_t chunk_tokens = 0);

}  // namespace kvs
