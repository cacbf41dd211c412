#include "planner/model_config.h"

#include "core/json_nesting.h"

#include "kvcache/kv_cache_groups.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace kvs {
namespace {

using nlohmann::json;

// An unsigned integer field, or nullopt when absent or null. Errors on another type or a value
// out of range.
Result<std::optional<uint64_t>> get_uint(const json& j, const char* key, uint64_t max) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::optional<uint64_t>{};
  // Parsed files give non-negative integers as unsigned; built objects may hold them signed.
  if (!it->is_number_integer() || (!it->is_number_unsigned() && it->get<int64_t>() < 0))
    return invalid_argument(std::string("config field '") + key +
                            "' must be a non-negative integer");
  const uint64_t v = it->get<uint64_t>();
  if (v > max)
    return invalid_argument(std::string("config field '") + key + "' is implausibly large (" +
                            std::to_string(v) + ")");
  return std::optional<uint64_t>{v};
}

constexpr uint64_t kMaxDim = 1u << 24;

Result<uint32_t> get_u32_or(const json& j, const char* key, uint32_t fallback) {
  KVS_ASSIGN_OR_RETURN(auto v, get_uint(j, key, kMaxDim));
  return v ? static_cast<uint32_t>(*v) : fallback;
}

std::string get_string_or(const json& j, const char* key, std::string fallback) {
  auto it = j.find(key);
  if (it != j.end() && it->is_string()) return it->get<std::string>();
  return fallback;
}

bool get_bool_or(const json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  if (it != j.end() && it->is_boolean()) return it->get<bool>();
  return fallback;
}

std::string normalize_dtype(std::string d) {
  if (d == "bfloat16") return "bf16";
  if (d == "float16" || d == "fp16" || d == "half") return "f16";
  if (d == "float32" || d == "fp32" || d == "float") return "f32";
  return d;
}

// Bytes per element of a linear-attention state held in dtype `d` (a config dtype name).
Result<uint32_t> state_elem_bytes(const std::string& d, const char* field) {
  const std::string n = normalize_dtype(d);
  if (n == "f32") return 4u;
  if (n == "bf16" || n == "f16") return 2u;
  return invalid_argument(std::string("config field '") + field + "' = '" + d +
                          "' is not a state dtype the planner knows (float32, bfloat16, float16)");
}

struct LinearState {
  LinearStateBytes bytes;
  std::string conv_dtype, recurrent_dtype;
};

// A gated delta net layer's state per sequence (Qwen3-Next, Qwen3.5), as vLLM counts it
// (kv_geometry.h, gated_delta_net_state_bytes): the conv window in the model dtype, the recurrent
// state in `mamba_ssm_dtype` when the config sets it (Qwen3.5: float32), else the model dtype.
Result<LinearState> linear_attention_state(const json& c, const std::string& model_dtype) {
  if (auto it = c.find("linear_state_bytes_per_layer"); it != c.end() && it->is_number_unsigned())
    return LinearState{.bytes = {.recurrent = it->get<uint64_t>()}};
  KVS_ASSIGN_OR_RETURN(uint32_t k_heads, get_u32_or(c, "linear_num_key_heads", 0));
  KVS_ASSIGN_OR_RETURN(uint32_t v_heads, get_u32_or(c, "linear_num_value_heads", 0));
  KVS_ASSIGN_OR_RETURN(uint32_t k_dim, get_u32_or(c, "linear_key_head_dim", 0));
  KVS_ASSIGN_OR_RETURN(uint32_t v_dim, get_u32_or(c, "linear_value_head_dim", 0));
  KVS_ASSIGN_OR_RETURN(uint32_t conv, get_u32_or(c, "linear_conv_kernel_dim", 4));
  if (k_heads == 0 || v_heads == 0 || k_dim == 0 || v_dim == 0)
    return invalid_argument(
        "linear-attention layers need linear_num_key_heads, linear_num_value_heads, "
        "linear_key_head_dim and linear_value_head_dim (or linear_state_bytes_per_layer)");
  LinearState st;
  st.conv_dtype = normalize_dtype(model_dtype);
  st.recurrent_dtype = normalize_dtype(get_string_or(c, "mamba_ssm_dtype", model_dtype));
  KVS_ASSIGN_OR_RETURN(uint32_t conv_bytes, state_elem_bytes(model_dtype, "torch_dtype"));
  KVS_ASSIGN_OR_RETURN(uint32_t rec_bytes, state_elem_bytes(st.recurrent_dtype, "mamba_ssm_dtype"));
  st.bytes = gated_delta_net_state_bytes({.key_heads = k_heads,
                                          .value_heads = v_heads,
                                          .key_dim = k_dim,
                                          .value_dim = v_dim,
                                          .conv_kernel = conv},
                                         conv_bytes, rec_bytes);
  return st;
}

std::string linear_state_note(const LinearState& st) {
  if (st.conv_dtype.empty()) return "";
  return "linear-attention state per layer and sequence: conv " + std::to_string(st.bytes.conv) +
         " B (" + st.conv_dtype + ") + recurrent " + std::to_string(st.bytes.recurrent) + " B (" +
         st.recurrent_dtype + ")";
}

// What transformers' config class fills in for the fields that size the KV cache when a
// config.json omits them (the published Gemma 3 27B text_config has no sliding_window_pattern,
// Gemma 3 4B no head counts or head_dim). Only absent keys are filled; a null stays null (None).
json transformers_defaults(const std::string& model_type) {
  if (model_type == "gemma3" || model_type == "gemma3_text") {
    // Gemma3TextConfig (src/transformers/models/gemma3/configuration_gemma3.py): its layer_types
    // come from sliding_window_pattern (default 6): layer i slides unless (i + 1) % 6 == 0.
    // query_pre_attn_scalar, rope_theta and rope_local_base_freq do not change KV bytes.
    return {{"num_hidden_layers", 26},
            {"hidden_size", 2304},
            {"num_attention_heads", 8},
            {"num_key_value_heads", 4},
            {"head_dim", 256},
            {"sliding_window", 4096},
            {"sliding_window_pattern", 6},
            {"max_position_embeddings", 131072}};
  }
  if (model_type == "qwen2" || model_type == "qwen2_moe" || model_type == "qwen3" ||
      model_type == "qwen3_moe") {
    // Qwen2Config / Qwen3Config (and their MoE variants): use_sliding_window False,
    // sliding_window 4096, max_window_layers 28; layer i slides when use_sliding_window and
    // i >= max_window_layers (their __post_init__ builds layer_types that way).
    return {{"use_sliding_window", false}, {"sliding_window", 4096}, {"max_window_layers", 28}};
  }
  if (model_type == "falcon") {
    // FalconConfig: multi_query True, new_decoder_architecture False.
    return {{"multi_query", true}, {"new_decoder_architecture", false}};
  }
  return json::object();
}

// Rough parameter count of a llama-like decoder from its shapes (embeddings, attention, MLP or
// experts); used only when neither the catalog nor the user gives weights.
uint64_t estimate_parameters(const json& c, const PlannerModel& m, uint32_t head_dim,
                             uint32_t kv_heads) {
  const uint64_t hidden = m.hidden_size;
  const uint64_t vocab = c.value("vocab_size", 0ull);
  const uint64_t layers = m.layers.size();
  uint64_t inter = c.value("intermediate_size", 0ull);
  const uint64_t moe_inter = c.value("moe_intermediate_size", 0ull);
  const bool tied = c.value("tie_word_embeddings", false);
  const uint64_t attn =
      hidden * m.num_attention_heads * head_dim * 2 + hidden * uint64_t{kv_heads} * head_dim * 2;
  uint64_t mlp = 3 * hidden * inter;
  if (m.num_experts > 0) {
    const uint64_t expert_inter = moe_inter ? moe_inter : inter;
    const uint64_t shared =
        c.value("n_shared_experts", 0ull) + (c.contains("shared_expert_intermediate_size") ? 1 : 0);
    mlp = 3 * hidden * expert_inter * (m.num_experts + shared);
  }
  return vocab * hidden * (tied ? 1 : 2) + layers * (attn + mlp);
}

}  // namespace

uint32_t PlannerModel::kv_heads() const {
  for (const KvLayer& l : layers)
    if (l.kind == KvLayerKind::kFull || l.kind == KvLayerKind::kSliding) return l.kv_heads;
  return 0;
}

KvModelShape PlannerModel::kv_shape(KvDtype k, KvDtype v, uint32_t tp) const {
  return {.layers = layers, .k_dtype = k, .v_dtype = v, .tp = tp};
}

Result<double> weight_dtype_bytes(const std::string& dtype) {
  const std::string d = normalize_dtype(dtype);
  if (d == "f32") return 4.0;
  if (d == "bf16" || d == "f16") return 2.0;
  if (d == "fp8" || d == "fp8_e4m3" || d == "int8" || d == "q8_0") return 1.0;
  if (d == "int4" || d == "q4_0" || d == "fp4" || d == "nvfp4" || d == "mxfp4") return 0.5;
  return invalid_argument("unknown weight dtype '" + dtype +
                          "' (expected f32, bf16, f16, fp8, int8, int4)");
}

Result<PlannerModel> model_from_hf_config(const json& top, const std::string& origin) {
  if (!top.is_object()) return invalid_argument(origin + ": expected a JSON object");
  PlannerModel m;
  const json* cfg = &top;
  if (auto it = top.find("config"); it != top.end() && it->is_object()) cfg = &*it;
  // Multimodal checkpoints (Gemma 3) keep the language model's numbers in text_config.
  json merged;
  if (auto it = cfg->find("text_config"); it != cfg->end() && it->is_object()) {
    merged = *it;
    for (auto& [k, v] : cfg->items())
      if (k != "text_config" && !merged.contains(k)) merged[k] = v;
    cfg = &merged;
  }
  json c = *cfg;
  // A named local: ranging over a temporary's items() would iterate a destroyed object.
  const json defaults = transformers_defaults(get_string_or(c, "model_type", ""));
  for (const auto& [k, v] : defaults.items())
    if (!c.contains(k)) c[k] = v;
  m.name = get_string_or(top, "name", origin);
  m.display_name = get_string_or(top, "display_name", m.name);
  m.source = get_string_or(top, "source", origin);
  m.architecture = get_string_or(c, "model_type", "");
  auto fail = [&](const Status& s) { return Status(s.code(), origin + ": " + s.message()); };

  auto layers_r = get_uint(c, "num_hidden_layers", 4096);
  if (!layers_r.is_ok()) return fail(layers_r.status());
  uint64_t n_layers = layers_r->value_or(0);
  if (n_layers == 0) {
    auto alt = get_uint(c, "n_layer", 4096);  // Falcon's older configs
    if (alt.is_ok() && *alt) n_layers = **alt;
  }
  if (n_layers == 0) return invalid_argument(origin + ": num_hidden_layers is missing");

  auto heads = get_u32_or(c, "num_attention_heads", 0);
  if (!heads.is_ok()) return fail(heads.status());
  m.num_attention_heads = *heads;
  if (m.num_attention_heads == 0) {
    auto alt = get_u32_or(c, "n_head", 0);
    if (alt.is_ok()) m.num_attention_heads = *alt;
  }
  auto hidden = get_u32_or(c, "hidden_size", 0);
  if (!hidden.is_ok()) return fail(hidden.status());
  m.hidden_size = *hidden;
  auto max_ctx = get_u32_or(c, "max_position_embeddings", 0);
  if (max_ctx.is_ok()) m.max_context = *max_ctx;
  auto vocab = get_u32_or(c, "vocab_size", 0);
  if (vocab.is_ok()) m.vocab_size = *vocab;
  if (const auto tie = c.find("tie_word_embeddings"); tie != c.end() && tie->is_boolean())
    m.tied_embeddings = tie->get<bool>();
  for (const char* key : {"num_local_experts", "n_routed_experts", "num_experts"}) {
    auto e = get_u32_or(c, key, 0);
    if (e.is_ok() && *e > 0) {
      m.num_experts = *e;
      break;
    }
  }

  // MLA (DeepSeek V2/V3): one latent per token per layer.
  auto lora = get_u32_or(c, "kv_lora_rank", 0);
  if (!lora.is_ok()) return fail(lora.status());
  uint32_t head_dim_k = 0, head_dim_v = 0, kv_heads = 0;
  if (*lora > 0) {
    auto rope = get_u32_or(c, "qk_rope_head_dim", 0);
    if (!rope.is_ok()) return fail(rope.status());
    m.layers.assign(n_layers, KvLayer::mla(*lora, *rope));
  } else {
    if (m.num_attention_heads == 0)
      return invalid_argument(origin + ": num_attention_heads is missing");
    auto kvh = get_u32_or(c, "num_key_value_heads", 0);
    if (!kvh.is_ok()) return fail(kvh.status());
    kv_heads = *kvh;
    if (kv_heads == 0) {
      auto alt = get_u32_or(c, "num_kv_heads", 0);
      if (alt.is_ok()) kv_heads = *alt;
    }
    if (kv_heads == 0) kv_heads = m.num_attention_heads;
    // Falcon: multi_query means one KV head unless new_decoder_architecture, whatever
    // num_kv_heads says (FalconConfig writes num_kv_heads = num_attention_heads, 71 for Falcon
    // 7B; FalconAttention uses config.num_kv_heads only if new_decoder_architecture or not
    // multi_query, else 1).
    if (get_bool_or(c, "multi_query", false) && !get_bool_or(c, "new_decoder_architecture", false))
      kv_heads = 1;
    auto hd = get_u32_or(c, "head_dim", 0);
    if (!hd.is_ok()) return fail(hd.status());
    uint32_t head_dim = *hd;
    if (head_dim == 0) {
      if (m.hidden_size == 0 || m.hidden_size % m.num_attention_heads != 0)
        return invalid_argument(origin + ": head_dim is missing and hidden_size " +
                                std::to_string(m.hidden_size) +
                                " is not a multiple of num_attention_heads");
      head_dim = m.hidden_size / m.num_attention_heads;
    }
    // K and V head sizes that differ (planner fields; HF configs rarely have them).
    auto hk = get_u32_or(c, "k_head_dim", head_dim);
    auto hv = get_u32_or(c, "v_head_dim", head_dim);
    if (!hk.is_ok()) return fail(hk.status());
    if (!hv.is_ok()) return fail(hv.status());
    head_dim_k = *hk;
    head_dim_v = *hv;

    auto window_r = get_u32_or(c, "sliding_window", 0);
    if (!window_r.is_ok()) return fail(window_r.status());
    const uint32_t raw_window = *window_r;  // what layer_types' sliding layers use
    // Qwen-style configs (max_window_layers) window only the layers from max_window_layers on,
    // and only with use_sliding_window (default false there); others window every layer unless
    // use_sliding_window is false.
    auto max_window_layers = get_uint(c, "max_window_layers", 1u << 20);
    if (!max_window_layers.is_ok()) return fail(max_window_layers.status());
    const bool qwen_windows = max_window_layers->has_value();
    const uint32_t window = get_bool_or(c, "use_sliding_window", !qwen_windows) ? raw_window : 0;
    auto chunk = get_u32_or(c, "attention_chunk_size", 0);
    const KvLayer full = KvLayer::full(kv_heads, head_dim_k, head_dim_v);
    auto windowed = [&](uint32_t w) {
      return KvLayer::sliding(kv_heads, head_dim_k, head_dim_v, w);
    };

    const std::string dtype =
        normalize_dtype(get_string_or(c, "torch_dtype", get_string_or(c, "dtype", "bf16")));
    std::optional<LinearState> state;
    auto linear_layer = [&]() -> Result<KvLayer> {
      if (!state) {
        KVS_ASSIGN_OR_RETURN(state, linear_attention_state(c, dtype));
        if (std::string note = linear_state_note(*state); !note.empty()) m.notes.push_back(note);
      }
      return KvLayer::no_kv(state->bytes.total());
    };

    auto interval = get_u32_or(c, "full_attention_interval", 0);
    auto pattern = get_u32_or(c, "sliding_window_pattern", 0);
    if (auto lt = c.find("layer_types"); lt != c.end() && lt->is_array()) {
      if (lt->size() != n_layers)
        return invalid_argument(origin + ": layer_types has " + std::to_string(lt->size()) +
                                " entries for " + std::to_string(n_layers) + " layers");
      for (const auto& t : *lt) {
        const std::string type = t.is_string() ? t.get<std::string>() : "";
        if (type == "full_attention" || type == "attention") {
          m.layers.push_back(full);
        } else if (type == "sliding_attention") {
          if (raw_window == 0)
            return invalid_argument(origin + ": sliding_attention layers but no sliding_window");
          m.layers.push_back(windowed(raw_window));
        } else if (type == "chunked_attention") {
          if (!chunk.is_ok() || *chunk == 0)
            return invalid_argument(origin + ": chunked_attention needs attention_chunk_size");
          m.layers.push_back(windowed(*chunk));
        } else if (type == "linear_attention") {
          auto l = linear_layer();
          if (!l.is_ok()) return fail(l.status());
          m.layers.push_back(*l);
        } else {
          return unimplemented(origin + ": layer type '" + type +
                               "' is not known to the planner (expected full_attention, "
                               "sliding_attention, chunked_attention or linear_attention)");
        }
      }
    } else if (interval.is_ok() && *interval > 0) {
      auto l = linear_layer();
      if (!l.is_ok()) return fail(l.status());
      for (uint64_t i = 0; i < n_layers; ++i)
        m.layers.push_back((i + 1) % *interval == 0 ? full : *l);
    } else if (pattern.is_ok() && *pattern > 0 && window > 0) {
      for (uint64_t i = 0; i < n_layers; ++i)
        m.layers.push_back((i + 1) % *pattern == 0 ? full : windowed(window));
    } else if (m.architecture == "gemma2" && window > 0) {
      for (uint64_t i = 0; i < n_layers; ++i)
        m.layers.push_back(i % 2 == 0 ? windowed(window) : full);
    } else if (qwen_windows) {
      for (uint64_t i = 0; i < n_layers; ++i)
        m.layers.push_back(window > 0 && i >= **max_window_layers ? windowed(window) : full);
    } else if (window > 0 && (m.max_context == 0 || window < m.max_context)) {
      m.layers.assign(n_layers, windowed(window));
    } else {
      m.layers.assign(n_layers, full);
    }
  }

  m.weight_dtype = normalize_dtype(get_string_or(
      top, "weight_dtype", get_string_or(c, "torch_dtype", get_string_or(c, "dtype", "bf16"))));
  auto params = get_uint(top, "num_parameters", uint64_t{1} << 50);
  if (!params.is_ok()) return fail(params.status());
  if (*params) {
    m.num_parameters = **params;
  } else if (m.hidden_size > 0) {
    m.num_parameters = estimate_parameters(
        c, m, head_dim_k ? head_dim_k : m.hidden_size / std::max(1u, m.num_attention_heads),
        kv_heads);
    m.parameters_estimated = m.num_parameters > 0;
  }
  if (auto it = top.find("notes"); it != top.end() && it->is_array()) {
    std::vector<std::string> written;  // the catalog's notes first, then the computed ones
    for (const auto& n : *it)
      if (n.is_string()) written.push_back(n.get<std::string>());
    m.notes.insert(m.notes.begin(), written.begin(), written.end());
  }
  return m;
}

Result<PlannerModel> model_from_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return not_found(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  KVS_RETURN_IF_ERROR(check_json_nesting(text, path));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument(path + ": not valid JSON");
  return model_from_hf_config(j, path);
}

Result<KvModelShape> engine_kv_shape(const PlannerModel& m, KvDtype k, KvDtype v) {
  if (m.layers.empty()) return invalid_argument(m.name + ": no layers");
  const KvLayer& first = m.layers.front();
  for (const KvLayer& l : m.layers) {
    const bool paged = l.kind == KvLayerKind::kFull || l.kind == KvLayerKind::kSliding;
    if (!paged || l.kv_heads != first.kv_heads || l.head_dim_k != first.head_dim_k ||
        l.head_dim_v != first.head_dim_v || l.head_dim_k != l.head_dim_v)
      return unimplemented(m.name +
                           ": the engine runs full-attention and sliding-window layers with equal "
                           "heads only (no MLA, linear layers or K/V head sizes that differ)");
  }
  KvModelShape shape{.layers = m.layers, .k_dtype = k, .v_dtype = v, .tp = 1};
  if (!KvCacheGroups::of_layers(shape.layers).is_ok())
    return unimplemented(m.name + ": its layers cannot share one block pool");
  return shape;
}

}  // namespace kvs
