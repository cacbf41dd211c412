// model_config: a model as the planner sees it — its per-layer KV description (kv_geometry's
// KvLayer list), its size (parameters / weight bytes) and where the numbers came from. Built from
// a Hugging Face config.json, a catalog entry (data/models/*.json: the config values plus
// provenance) or a GGUF file's metadata (weights are not read).
//
// Fields a config omits take transformers' defaults for its model_type first (gemma3: 8 heads,
// 4 KV heads, head_dim 256, sliding_window 4096, sliding_window_pattern 6; qwen2/qwen3 (+ MoE):
// use_sliding_window false, max_window_layers 28; falcon: multi_query true). How the layer kinds
// are derived (first rule that applies):
//   kv_lora_rank set                      -> every layer MLA (kv_lora_rank + qk_rope_head_dim)
//   layer_types [..]                      -> per layer: full_attention, sliding_attention,
//                                            linear_attention (fixed state), chunked_attention
//   full_attention_interval k (Qwen3-Next)-> layer i full when (i+1) % k == 0, else linear
//   sliding_window_pattern p (Gemma 3)    -> layer i full when (i+1) % p == 0, else windowed
//   model_type gemma2                     -> even layers windowed, odd layers full
//   max_window_layers m (Qwen2/Qwen3)     -> layer i windowed when use_sliding_window (default
//                                            false) and i >= m, else full
//   sliding_window set (and use_sliding_window not false) -> every layer windowed
//   otherwise                             -> every layer full attention
// KV heads default to the attention heads (MHA); `multi_query` without
// `new_decoder_architecture` (Falcon) means one KV head whatever num_kv_heads says; head_dim
// defaults to hidden_size / num_attention_heads. A linear-attention state keeps its conv window
// in the model dtype and its recurrent part in `mamba_ssm_dtype` (when set), as vLLM does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "kvcache/kv_geometry.h"

namespace kvs {

class GgufFile;

struct PlannerModel {
  std::string name;          // catalog name, file name or general.name
  std::string display_name;  // "Llama 3.1 8B"
  std::string source;        // where the config values came from (HF repo URL or file path)
  std::string architecture;  // model_type / general.architecture
  std::vector<KvLayer> layers;
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
