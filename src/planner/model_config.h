// model_config: a model as the planner sees it — its per-layer KV description (kv_geometry's
// KvLayer list), its size (parameters / weight bytes; param_estimate.h when only the config's
// shapes give it) and where the numbers came from. Built from
// a Hugging Face config.json, a catalog entry (data/models/*.json: the config values plus
// provenance) or a GGUF file's metadata (weights are not read).
//
// Fields a config omits take transformers' defaults for its model_type first (gemma3: 8 heads,
// 4 KV heads, head_dim 256, sliding_window 4096, sliding_window_pattern 6; qwen2/qwen3 (+ MoE):
// use_sliding_window false, max_window_layers 28; falcon: multi_query true). Which layer is which
// is layer_pattern.h (layer_types, hybrid_override_pattern, attn_layer_period, attn_type_list,
// Falcon-H1, full_attention_interval, Llama 4 chunks, the window rules, num_kv_shared_layers);
// kv_lora_rank makes every layer MLA. The recurrent states are sized in ssm_state.h (Mamba1,
// Mamba2, lightning) and here (gated delta net).
//
// Key spellings read (first that is set): layers num_hidden_layers, n_layer; heads
// num_attention_heads, n_head; KV heads num_key_value_heads, num_kv_heads, n_head_kv; hidden
// hidden_size, n_embd; head_dim head_dim, attention_head_dim (else hidden / heads); context
// max_position_embeddings, n_positions. KV heads default to the attention heads (MHA);
// `multi_query` (GPT-BigCode, Falcon) means one KV head unless `new_decoder_architecture` or
// `n_head_kv` says otherwise (RefinedWeb: n_head_kv is the KV heads). The KV dtype `auto` and the
// states use the engine's dtype for the checkpoint (runtime_dtype: float32 checkpoints run in
// 16 bits).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "kvcache/kv_geometry.h"
#include "planner/layer_role.h"

namespace kvs {

class GgufFile;

struct PlannerModel {
  std::string name;          // catalog name, file name or general.name
  std::string display_name;  // "Llama 3.1 8B"
  std::string source;        // where the config values came from (HF repo URL or file path)
  std::string architecture;  // model_type / general.architecture
  // One geometry entry per layer, except that a layer running attention and an SSM side by side
  // (Falcon-H1) has two; `roles` names each entry (empty: default_layer_role of each).
  std::vector<KvLayer> layers;
  std::vector<LayerRole> roles;
  uint32_t num_layers = 0;  // the model's layers (0: layers.size())
  uint32_t num_attention_heads = 0;
  uint32_t hidden_size = 0;
  uint32_t max_context = 0;  // max_position_embeddings / context_length (0 = unknown)
  uint32_t num_experts = 0;  // MoE routed experts (0 = dense); experts change weights, not KV
  // Token embedding rows and whether the LM head reuses them (tie_word_embeddings, or a GGUF
  // without output.weight): what a FLOP count needs to leave the embedding gather out and count
  // the LM head per sampled row (kvserve simulate's step-time model). 0 = unknown.
  uint32_t vocab_size = 0;
  bool tied_embeddings = false;

  uint64_t num_parameters = 0;           // 0 = unknown
  bool parameters_estimated = false;     // estimated from the config's shapes
  std::string weight_dtype;              // "bf16", "fp8", ... (the checkpoint's default)
  std::optional<uint64_t> weight_bytes;  // exact (GGUF tensor bytes), when known
  std::vector<std::string> notes;        // caveats worth printing (e.g. a window the config sets)

  [[nodiscard]] uint32_t layer_count() const;
  // `roles`, or the default role of every entry when it is empty.
  [[nodiscard]] std::vector<LayerRole> layer_roles() const;
  // KV heads of the first attention layer (0 when there is none, e.g. MLA).
  [[nodiscard]] uint32_t kv_heads() const;
  [[nodiscard]] KvModelShape kv_shape(KvDtype k, KvDtype v, uint32_t tp) const;
};

// Bytes per parameter of a weight dtype name: f32 4, bf16/f16 2, fp8/int8 1, int4/q4 0.5.
[[nodiscard]] Result<double> weight_dtype_bytes(const std::string& dtype);

// A config.json object (or a catalog entry: {"name", "display_name", "source",
// "num_parameters", "weight_dtype", "config": {...}}). Multimodal configs use their
// "text_config". `origin` names the file for messages and the default source.
[[nodiscard]] Result<PlannerModel> model_from_hf_config(const nlohmann::json& j,
                                                        const std::string& origin);
// Reads and parses a config.json / catalog file.
[[nodiscard]] Result<PlannerModel> model_from_json_file(const std::string& path);

// GGUF metadata: <arch>.block_count, .attention.head_count(_kv) (scalar or per layer),
// .attention.key_length / value_length, .attention.sliding_window, .attention.kv_lora_rank,
// .rope.dimension_count, .expert_count, .full_attention_interval; weights = tensor bytes.
[[nodiscard]] Result<PlannerModel> model_from_gguf(const GgufFile& file, const std::string& origin);

// The KV shape the engine would run for `model` in formats k / v: full-attention and
// sliding-window layers with the same heads and K/V head sizes (the engine pages them in layer
// groups, kv_cache_groups.h); unimplemented, naming why, for any other shape.
[[nodiscard]] Result<KvModelShape> engine_kv_shape(const PlannerModel& model, KvDtype k, KvDtype v);

}  // namespace kvs
