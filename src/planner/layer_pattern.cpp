#include "planner/layer_pattern.h"

#include <nlohmann/json.hpp>

#include "planner/config_fields.h"

namespace kvs {
namespace {

using nlohmann::json;

std::string count_of(uint64_t n) { return std::to_string(n); }

// A per-layer list field: present as an array of exactly n entries, absent, or an error.
Result<const json*> layer_list(const json& c, const char* key, uint64_t n) {
  auto it = c.find(key);
  if (it == c.end() || it->is_null()) return static_cast<const json*>(nullptr);
  if (!it->is_array())
    return invalid_argument(std::string("config field '") + key + "' must be a list");
  if (it->size() != n)
    return invalid_argument(std::string("config field '") + key + "' has " + count_of(it->size()) +
                            " entries for " + count_of(n) + " layers");
  return &*it;
}

bool has_mamba2_heads(const json& c) {
  return c.contains("mamba_n_heads") || c.contains("mamba_num_heads");
}

Result<LayerPattern> from_layer_types(const json& types, const json& c, uint32_t raw_window,
                                      uint32_t chunk) {
  LayerPattern p{.window = raw_window, .chunk = chunk, .rule = "layer_types"};
  for (const json& t : types) {
    const std::string type = t.is_string() ? t.get<std::string>() : "";
    if (type == "full_attention" || type == "attention") {
      p.roles.push_back(LayerRole::kFullAttention);
    } else if (type == "sliding_attention") {
      if (raw_window == 0)
        return invalid_argument("sliding_attention layers but no sliding_window");
      p.roles.push_back(LayerRole::kSlidingWindow);
    } else if (type == "chunked_attention") {
      if (chunk == 0) return invalid_argument("chunked_attention needs attention_chunk_size");
      p.roles.push_back(LayerRole::kChunkedAttention);
    } else if (type == "linear_attention") {
      p.roles.push_back(LayerRole::kLinearAttention);
    } else if (type == "mamba") {
      p.roles.push_back(has_mamba2_heads(c) ? LayerRole::kMamba2 : LayerRole::kMamba1);
    } else {
      return unimplemented("layer type '" + type +
                           "' is not known to the planner (expected full_attention, attention, "
                           "sliding_attention, chunked_attention, linear_attention or mamba)");
    }
  }
  return p;
}

Result<LayerPattern> from_hybrid_override(const std::string& pattern, uint64_t n) {
  if (pattern.size() != n)
    return invalid_argument("hybrid_override_pattern has " + count_of(pattern.size()) +
                            " characters for " + count_of(n) + " layers");
  LayerPattern p{.rule = "hybrid_override_pattern"};
  for (const char ch : pattern) {
    switch (ch) {
      case 'M': p.roles.push_back(LayerRole::kMamba2); break;
      case '*': p.roles.push_back(LayerRole::kFullAttention); break;
      case '-':
      case 'E': p.roles.push_back(LayerRole::kNoMixer); break;
      default:
        return invalid_argument(std::string("hybrid_override_pattern has '") + ch +
                                "' (expected M Mamba2, * attention, - MLP, E MoE)");
    }
  }
  return p;
}

Result<LayerPattern> from_attn_type_list(const json& list) {
  LayerPattern p{.rule = "attn_type_list"};
  for (const json& t : list) {
    if (!t.is_number_integer() || (t.get<int64_t>() != 0 && t.get<int64_t>() != 1))
      return invalid_argument("attn_type_list entries must be 0 (lightning) or 1 (softmax)");
    p.roles.push_back(t.get<int64_t>() == 1 ? LayerRole::kFullAttention : LayerRole::kLightning);
  }
  return p;
}

// Llama 4: NoPE layers attend to the whole context, RoPE layers within their chunk
// (transformers' Llama4TextConfig: no_rope_layers[i] = 1 means layer i uses RoPE; empty means
// every no_rope_layer_interval-th layer is NoPE; vLLM chunks exactly the RoPE layers).
Result<LayerPattern> llama4_chunks(const json& c, uint64_t n, uint32_t chunk) {
  LayerPattern p{.chunk = chunk, .rule = "attention_chunk_size"};
  const json* list = nullptr;
  // The published Scout file has "no_rope_layers": [], i.e. the interval.
  if (auto it = c.find("no_rope_layers"); it == c.end() || !it->is_array() || !it->empty()) {
    KVS_ASSIGN_OR_RETURN(list, layer_list(c, "no_rope_layers", n));
  }
  if (list != nullptr) {
    for (const json& e : *list) {
      if (!e.is_number_integer() && !e.is_boolean())
        return invalid_argument("no_rope_layers entries must be 0 or 1");
      const bool rope = e.is_boolean() ? e.get<bool>() : e.get<int64_t>() != 0;
      p.roles.push_back(rope ? LayerRole::kChunkedAttention : LayerRole::kFullAttention);
    }
    return p;
  }
  KVS_ASSIGN_OR_RETURN(uint32_t interval, config_u32_or(c, "no_rope_layer_interval", 4));
  if (interval == 0) return invalid_argument("no_rope_layer_interval must be at least 1");
  for (uint64_t i = 0; i < n; ++i)
    p.roles.push_back((i + 1) % interval == 0 ? LayerRole::kFullAttention
                                              : LayerRole::kChunkedAttention);
  return p;
}

// The rules that decide between full and windowed attention only.
Result<LayerPattern> windowed_or_full(const json& c, uint64_t n, uint32_t max_context,
                                      uint32_t raw_window) {
  KVS_ASSIGN_OR_RETURN(auto max_window_layers, config_uint(c, "max_window_layers", 1u << 20));
  const bool qwen_windows = max_window_layers.has_value();
  // Qwen-style configs window only from max_window_layers on, and only with use_sliding_window
  // (default false there); others window unless use_sliding_window is false.
  const uint32_t window = config_bool_or(c, "use_sliding_window", !qwen_windows) ? raw_window : 0;
  KVS_ASSIGN_OR_RETURN(uint32_t period, config_u32_or(c, "sliding_window_pattern", 0));
  const std::string model_type = config_string_or(c, "model_type", "");
  LayerPattern p{.window = window};
  auto each = [&](auto windowed) {
    for (uint64_t i = 0; i < n; ++i)
      p.roles.push_back(windowed(i) ? LayerRole::kSlidingWindow : LayerRole::kFullAttention);
  };
  if (period > 0 && window > 0) {
    p.rule = "sliding_window_pattern";
    each([&](uint64_t i) { return (i + 1) % period != 0; });
  } else if (model_type == "gemma2" && window > 0) {
    p.rule = "model_type gemma2";
    each([](uint64_t i) { return i % 2 == 0; });
  } else if (qwen_windows) {
    each([&](uint64_t i) { return window > 0 && i >= *max_window_layers; });
  } else if (window > 0 && (max_context == 0 || window < max_context)) {
    p.rule = "sliding_window";
    each([](uint64_t) { return true; });
  } else {
    each([](uint64_t) { return false; });
  }
  return p;
}

Result<LayerPattern> base_pattern(const json& c, uint64_t n, uint32_t max_context) {
  KVS_ASSIGN_OR_RETURN(uint32_t raw_window, config_u32_or(c, "sliding_window", 0));
  KVS_ASSIGN_OR_RETURN(uint32_t chunk, config_u32_or(c, "attention_chunk_size", 0));
  KVS_ASSIGN_OR_RETURN(const json* types, layer_list(c, "layer_types", n));
  if (types != nullptr) return from_layer_types(*types, c, raw_window, chunk);
  if (auto it = c.find("hybrid_override_pattern"); it != c.end() && it->is_string())
    return from_hybrid_override(it->get<std::string>(), n);
  KVS_ASSIGN_OR_RETURN(auto period, config_uint(c, "attn_layer_period", 1u << 20));
  if (period) {
    KVS_ASSIGN_OR_RETURN(uint32_t offset, config_u32_or(c, "attn_layer_offset", 0));
    if (*period == 0 || offset >= *period)
      return invalid_argument("attn_layer_period must be positive and attn_layer_offset below it");
    LayerPattern p{.rule = "attn_layer_period / attn_layer_offset"};
    for (uint64_t i = 0; i < n; ++i)
      p.roles.push_back(i % *period == offset ? LayerRole::kFullAttention : LayerRole::kMamba1);
    return p;
  }
  KVS_ASSIGN_OR_RETURN(const json* attn_types, layer_list(c, "attn_type_list", n));
  if (attn_types != nullptr) return from_attn_type_list(*attn_types);
  if (config_string_or(c, "model_type", "") == "falcon_h1")
    return LayerPattern{.roles = std::vector<LayerRole>(n, LayerRole::kMamba2Parallel),
                        .rule = "model_type falcon_h1"};
  KVS_ASSIGN_OR_RETURN(uint32_t interval, config_u32_or(c, "full_attention_interval", 0));
  if (interval > 0) {
    LayerPattern p{.rule = "full_attention_interval"};
    for (uint64_t i = 0; i < n; ++i)
      p.roles.push_back((i + 1) % interval == 0 ? LayerRole::kFullAttention
                                                : LayerRole::kLinearAttention);
    return p;
  }
  if (chunk > 0) return llama4_chunks(c, n, chunk);
  return windowed_or_full(c, n, max_context, raw_window);
}

}  // namespace

Result<LayerPattern> layer_pattern(const json& c, uint64_t n, uint32_t max_context) {
  KVS_ASSIGN_OR_RETURN(LayerPattern p, base_pattern(c, n, max_context));
  // Gemma 3n: the last num_kv_shared_layers layers read the KV of the last earlier layer of their
  // kind and store none (transformers' Gemma3n attention; vLLM allocates them no cache).
  KVS_ASSIGN_OR_RETURN(uint32_t shared, config_u32_or(c, "num_kv_shared_layers", 0));
  if (shared > 0) {
    if (shared >= n)
      return invalid_argument("num_kv_shared_layers " + count_of(shared) +
                              " leaves no layer holding KV of " + count_of(n));
    for (uint64_t i = n - shared; i < n; ++i) p.roles[i] = LayerRole::kKvShared;
    p.rule += (p.rule.empty() ? "" : ", ") + std::string("num_kv_shared_layers");
  }
  return p;
}

}  // namespace kvs
