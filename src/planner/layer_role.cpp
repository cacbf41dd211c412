#include "planner/layer_role.h"

#include <array>

#include "core/check.h"

namespace kvs {

const char* layer_role_name(LayerRole role) {
  switch (role) {
    case LayerRole::kFullAttention: return "full attention";
    case LayerRole::kSlidingWindow: return "sliding window";
    case LayerRole::kChunkedAttention: return "chunked attention";
    case LayerRole::kMlaLatent: return "MLA latent";
    case LayerRole::kLinearAttention: return "linear attention (gated delta net)";
    case LayerRole::kMamba1: return "Mamba1";
    case LayerRole::kMamba2: return "Mamba2";
    case LayerRole::kMamba2Parallel: return "Mamba2 (beside attention)";
    case LayerRole::kLightning: return "lightning attention";
    case LayerRole::kKvShared: return "KV shared (reuses earlier KV)";
    case LayerRole::kNoMixer: return "MLP/MoE only";
    case LayerRole::kRecurrent: return "recurrent state";
  }
  return "unknown";
}

const char* layer_role_key(LayerRole role) {
  switch (role) {
    case LayerRole::kFullAttention: return "full_attention";
    case LayerRole::kSlidingWindow: return "sliding_window";
    case LayerRole::kChunkedAttention: return "chunked_attention";
    case LayerRole::kMlaLatent: return "mla_latent";
    case LayerRole::kLinearAttention: return "linear_attention";
    case LayerRole::kMamba1: return "mamba1";
    case LayerRole::kMamba2: return "mamba2";
    case LayerRole::kMamba2Parallel: return "mamba2_parallel";
    case LayerRole::kLightning: return "lightning_attention";
    case LayerRole::kKvShared: return "kv_shared";
    case LayerRole::kNoMixer: return "mlp_only";
    case LayerRole::kRecurrent: return "recurrent_state";
  }
  return "unknown";
}

LayerRole default_layer_role(const KvLayer& l) {
  switch (l.kind) {
    case KvLayerKind::kFull: return LayerRole::kFullAttention;
    case KvLayerKind::kSliding: return LayerRole::kSlidingWindow;
    case KvLayerKind::kMla: return LayerRole::kMlaLatent;
    case KvLayerKind::kNoKv: return LayerRole::kRecurrent;
  }
  return LayerRole::kRecurrent;
}

std::vector<LayerRoleBytes> layer_role_breakdown(const std::vector<LayerRole>& roles,
                                                 const KvModelShape& s, uint64_t n,
                                                 uint64_t chunk) {
  KVS_CHECK(roles.empty() || roles.size() == s.layers.size());
  std::array<LayerRoleBytes, kNumLayerRoles> by{};
  for (size_t i = 0; i < s.layers.size(); ++i) {
    const KvLayer& l = s.layers[i];
    const LayerRole role = roles.empty() ? default_layer_role(l) : roles[i];
    LayerRoleBytes& b = by[static_cast<size_t>(role)];
    b.role = role;
    ++b.layers;
    const uint64_t token = kv_layer_token_bytes(s, i);
    const uint64_t state = kv_layer_state_bytes(l, s.tp);
    b.bytes_per_token += token;
    b.state_bytes += state;
    b.request_bytes += token * kv_layer_held_tokens(l, n, chunk) + state + kv_layer_row_bytes(l, s);
  }
  std::vector<LayerRoleBytes> out;
  for (const LayerRoleBytes& b : by)
    if (b.layers > 0) out.push_back(b);
  return out;
}

}  // namespace kvs
