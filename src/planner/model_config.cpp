#include "planner/model_config.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <sstream>

#include "kvcache/kv_cache_groups.h"
#include "planner/config_fields.h"
#include "planner/config_json.h"
#include "planner/layer_pattern.h"
#include "planner/param_estimate.h"
#include "planner/ssm_state.h"

#include <nlohmann/json.hpp>

namespace kvs {
namespace {

using nlohmann::json;

// A gated delta net layer's state per sequence (Qwen3-Next, Qwen3.5), as vLLM counts it
// (kv_geometry.h, gated_delta_net_state_bytes): the conv window in the model dtype, the recurrent
// state in `mamba_ssm_cache_dtype` / `mamba_ssm_dtype` when the config sets it (Qwen3.5:
// float32), else the model dtype.
Result<RecurrentState> linear_attention_state(const json& c) {
  if (auto it = c.find("linear_state_bytes_per_layer"); it != c.end() && it->is_number_unsigned())
    return RecurrentState{.bytes = {.recurrent = it->get<uint64_t>()}};
  KVS_ASSIGN_OR_RETURN(uint32_t k_heads, config_u32_or(c, "linear_num_key_heads", 0));
  KVS_ASSIGN_OR_RETURN(uint32_t v_heads, config_u32_or(c, "linear_num_value_heads", 0));
  KVS_ASSIGN_OR_RETURN(uint32_t k_dim, config_u32_or(c, "linear_key_head_dim", 0));
  KVS_ASSIGN_OR_RETURN(uint32_t v_dim, config_u32_or(c, "linear_value_head_dim", 0));
  KVS_ASSIGN_OR_RETURN(uint32_t conv, config_u32_or(c, "linear_conv_kernel_dim", 4));
  if (k_heads == 0 || v_heads == 0 || k_dim == 0 || v_dim == 0)
    return invalid_argument(
        "linear-attention layers need linear_num_key_heads, linear_num_value_heads, "
        "linear_key_head_dim and linear_value_head_dim (or linear_state_bytes_per_layer)");
  const std::string conv_dtype = runtime_dtype(c);
  const char* field =
      c.contains("mamba_ssm_cache_dtype") ? "mamba_ssm_cache_dtype" : "mamba_ssm_dtype";
  std::string rec_dtype = normalize_dtype(config_string_or(c, field, conv_dtype));
  if (rec_dtype == "auto") rec_dtype = conv_dtype;
  KVS_ASSIGN_OR_RETURN(uint32_t conv_bytes, state_elem_bytes(conv_dtype, "torch_dtype"));
  KVS_ASSIGN_OR_RETURN(uint32_t rec_bytes, state_elem_bytes(rec_dtype, field));
  RecurrentState st;
  st.bytes = gated_delta_net_state_bytes({.key_heads = k_heads,
                                          .value_heads = v_heads,
                                          .key_dim = k_dim,
                                          .value_dim = v_dim,
                                          .conv_kernel = conv},
                                         conv_bytes, rec_bytes);
  st.note = "linear-attention state per layer and sequence: conv " + std::to_string(st.bytes.conv) +
            " B (" + conv_dtype + ") + recurrent " + std::to_string(st.bytes.recurrent) + " B (" +
            rec_dtype + ")";
  return st;
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
            {"max_position_embeddings", 131072},
            {"tie_word_embeddings", true}};  // the LM head is the embedding
  }
  if (model_type == "qwen2" || model_type == "qwen2_moe" || model_type == "qwen3" ||
      model_type == "qwen3_moe") {
    // Qwen2Config / Qwen3Config (and their MoE variants): use_sliding_window False,
    // sliding_window 4096, max_window_layers 28; layer i slides when use_sliding_window and
    // i >= max_window_layers (their __post_init__ builds layer_types that way).
    return {{"use_sliding_window", false}, {"sliding_window", 4096}, {"max_window_layers", 28}};
  }
  if (model_type == "deepseek_v3") {
    // DeepseekV3Config: the first 3 layers are dense MLPs, every later one MoE (the parameter
    // estimate; no KV byte depends on it).
    return {{"first_k_dense_replace", 3}, {"moe_layer_freq", 1}};
  }
  if (model_type == "falcon") {
    // FalconConfig: multi_query True, new_decoder_architecture False; the LM head is the
    // embedding (tie_word_embeddings, PretrainedConfig's default True).
    return {
        {"multi_query", true}, {"new_decoder_architecture", false}, {"tie_word_embeddings", true}};
  }
  if (model_type == "RefinedWeb" || model_type == "RefinedWebModel") {
    // The original Falcon configs (RWConfig): the LM head is the embedding, as in FalconConfig.
    return {{"tie_word_embeddings", true}};
  }
  if (model_type == "gpt_bigcode") {
    // GPTBigCodeConfig: multi_query True (one KV head), n_positions 1024; lm_head tied to wte.
    return {{"multi_query", true}, {"n_positions", 1024}, {"tie_word_embeddings", true}};
  }
  if (model_type == "gemma3n" || model_type == "gemma3n_text") {
    // Gemma3nTextConfig: tie_word_embeddings True.
    return {{"tie_word_embeddings", true}};
  }
  return json::object();
}

// KV heads of an attention layer. Falcon: multi_query means one KV head unless
// new_decoder_architecture, whatever num_kv_heads says (FalconConfig writes num_kv_heads =
// num_attention_heads, 71 for Falcon 7B; FalconAttention uses config.num_kv_heads only if
// new_decoder_architecture or not multi_query, else 1). The original RefinedWeb configs
// (Falcon 40B) name them n_head_kv, which vLLM's RWConfig takes as the KV heads (1 when absent).
Result<uint32_t> attention_kv_heads(const json& c, uint32_t heads) {
  const std::string model_type = config_string_or(c, "model_type", "");
  KVS_ASSIGN_OR_RETURN(auto n_head_kv, config_uint(c, "n_head_kv"));
  if (model_type == "RefinedWeb" || model_type == "RefinedWebModel")
    return n_head_kv ? static_cast<uint32_t>(*n_head_kv) : 1u;
  KVS_ASSIGN_OR_RETURN(
      uint32_t kv, config_first_u32(c, {"num_key_value_heads", "num_kv_heads", "n_head_kv"}, 0));
  if (kv == 0) kv = heads;
  if (config_bool_or(c, "multi_query", false) &&
      !config_bool_or(c, "new_decoder_architecture", false))
    kv = 1;
  return kv;
}

// The per-layer entries of a non-MLA config: layer_pattern decides the roles, this sizes them.
struct AttentionShape {
  uint32_t kv_heads = 0, head_dim_k = 0, head_dim_v = 0;
};

Status build_layers(const json& c, const LayerPattern& p, const AttentionShape& a, uint32_t heads,
                    PlannerModel& m) {
  std::optional<RecurrentState> mamba1, mamba2, lightning, linear;
  auto state = [&](std::optional<RecurrentState>& slot, auto size) -> Result<uint64_t> {
    if (!slot) {
      KVS_ASSIGN_OR_RETURN(slot, size());
      if (!slot->note.empty()) m.notes.push_back(slot->note);
    }
    return slot->bytes.total();
  };
  const KvLayer full = KvLayer::full(a.kv_heads, a.head_dim_k, a.head_dim_v);
  auto add = [&](KvLayer l, LayerRole r) {
    m.layers.push_back(l);
    m.roles.push_back(r);
  };
  for (const LayerRole role : p.roles) {
    switch (role) {
      case LayerRole::kFullAttention: add(full, role); break;
      case LayerRole::kSlidingWindow:
        add(KvLayer::sliding(a.kv_heads, a.head_dim_k, a.head_dim_v, p.window), role);
        break;
      case LayerRole::kChunkedAttention:
        add(KvLayer::sliding(a.kv_heads, a.head_dim_k, a.head_dim_v, p.chunk), role);
        break;
      case LayerRole::kLinearAttention: {
        KVS_ASSIGN_OR_RETURN(uint64_t b, state(linear, [&] { return linear_attention_state(c); }));
        add(KvLayer::no_kv(b), role);
        break;
      }
      case LayerRole::kMamba1: {
        KVS_ASSIGN_OR_RETURN(uint64_t b, state(mamba1, [&] { return mamba1_state(c); }));
        add(KvLayer::no_kv(b), role);
        break;
      }
      case LayerRole::kMamba2:
      case LayerRole::kMamba2Parallel: {
        KVS_ASSIGN_OR_RETURN(uint64_t b, state(mamba2, [&] { return mamba2_state(c); }));
        if (role == LayerRole::kMamba2Parallel) add(full, LayerRole::kFullAttention);
        add(KvLayer::no_kv(b), role);
        break;
      }
      case LayerRole::kLightning: {
        KVS_ASSIGN_OR_RETURN(
            uint64_t b, state(lightning, [&] { return lightning_state(c, heads, a.head_dim_k); }));
        add(KvLayer::no_kv(b), role);
        break;
      }
      case LayerRole::kKvShared:
      case LayerRole::kNoMixer:
      case LayerRole::kRecurrent: add(KvLayer::no_kv(0), role); break;
      case LayerRole::kMlaLatent: return invalid_argument("MLA layers come from kv_lora_rank");
    }
  }
  return Status::ok();
}

// "layer kinds from hybrid_override_pattern: 23 Mamba2, 6 full attention, 23 MLP/MoE only".
std::string pattern_note(const LayerPattern& p) {
  std::array<uint32_t, kNumLayerRoles> count{};
  for (const LayerRole r : p.roles) ++count[static_cast<size_t>(r)];
  std::string s = "layer kinds from " + p.rule + ":";
  bool first = true;
  for (int r = 0; r < kNumLayerRoles; ++r) {
    if (count[r] == 0) continue;
    const auto role = static_cast<LayerRole>(r);
    s += std::string(first ? " " : ", ") + std::to_string(count[r]) + " " +
         (role == LayerRole::kMamba2Parallel ? "attention + Mamba2 side by side"
                                             : layer_role_name(role));
    first = false;
  }
  return s;
}

}  // namespace

uint32_t PlannerModel::layer_count() const {
  return num_layers > 0 ? num_layers : static_cast<uint32_t>(layers.size());
}

std::vector<LayerRole> PlannerModel::layer_roles() const {
  if (roles.size() == layers.size()) return roles;
  std::vector<LayerRole> out;
  for (const KvLayer& l : layers) out.push_back(default_layer_role(l));
  return out;
}

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
  // Multimodal checkpoints (Gemma 3, Llama 4, Gemma 3n) keep the language model in text_config.
  json merged;
  if (auto it = cfg->find("text_config"); it != cfg->end() && it->is_object()) {
    merged = *it;
    for (auto& [k, v] : cfg->items())
      if (k != "text_config" && !merged.contains(k)) merged[k] = v;
    cfg = &merged;
  }
  json c = *cfg;
  // A named local: ranging over a temporary's items() would iterate a destroyed object.
  const json defaults = transformers_defaults(config_string_or(c, "model_type", ""));
  for (const auto& [k, v] : defaults.items())
    if (!c.contains(k)) c[k] = v;
  m.name = config_string_or(top, "name", origin);
  m.display_name = config_string_or(top, "display_name", m.name);
  m.source = config_string_or(top, "source", origin);
  m.architecture = config_string_or(c, "model_type", "");
  auto fail = [&](const Status& s) { return Status(s.code(), origin + ": " + s.message()); };
  // Every field below is read the same way: a bad one fails with the file's name in front.
  auto read = [&](auto result, auto& out) -> Status {
    if (!result.is_ok()) return fail(result.status());
    out = std::move(result).value();
    return Status::ok();
  };
#define KVS_CONFIG_READ(lhs, expr) \
  if (Status read_status = read((expr), lhs); !read_status.is_ok()) return read_status

  uint32_t n_layers = 0;
  KVS_CONFIG_READ(n_layers, config_first_u32(c, {"num_hidden_layers", "n_layer"}, 0));
  if (n_layers == 0) return invalid_argument(origin + ": num_hidden_layers is missing");
  if (n_layers > 4096)
    return invalid_argument(origin + ": num_hidden_layers " + std::to_string(n_layers) +
                            " is implausibly large");
  m.num_layers = n_layers;
  KVS_CONFIG_READ(m.num_attention_heads, config_first_u32(c, {"num_attention_heads", "n_head"}, 0));
  KVS_CONFIG_READ(m.hidden_size, config_first_u32(c, {"hidden_size", "n_embd", "d_model"}, 0));
  KVS_CONFIG_READ(m.max_context,
                  config_first_u32(c, {"max_position_embeddings", "n_positions"}, 0));
  KVS_CONFIG_READ(m.vocab_size, config_u32_or(c, "vocab_size", 0));
  if (const auto tie = c.find("tie_word_embeddings"); tie != c.end() && tie->is_boolean())
    m.tied_embeddings = tie->get<bool>();
  for (const char* key : {"num_local_experts", "n_routed_experts", "num_experts"}) {
    auto e = config_u32_or(c, key, 0);
    if (e.is_ok() && *e > 0) {
      m.num_experts = *e;
      break;
    }
  }

  // MLA (DeepSeek V2/V3): one latent per token per layer.
  uint32_t lora = 0;
  KVS_CONFIG_READ(lora, config_u32_or(c, "kv_lora_rank", 0));
  AttentionShape a;
  std::vector<LayerRole> layer_roles;  // one per model layer, for the parameter estimate
  if (lora > 0) {
    uint32_t rope = 0;
    KVS_CONFIG_READ(rope, config_u32_or(c, "qk_rope_head_dim", 0));
    m.layers.assign(n_layers, KvLayer::mla(lora, rope));
    layer_roles.assign(n_layers, LayerRole::kMlaLatent);
  } else {
    if (m.num_attention_heads == 0)
      return invalid_argument(origin + ": num_attention_heads is missing");
    KVS_CONFIG_READ(a.kv_heads, attention_kv_heads(c, m.num_attention_heads));
    uint32_t head_dim = 0;
    KVS_CONFIG_READ(head_dim, config_first_u32(c, {"head_dim", "attention_head_dim"}, 0));
    if (head_dim == 0) {
      if (m.hidden_size == 0 || m.hidden_size % m.num_attention_heads != 0)
        return invalid_argument(origin + ": head_dim is missing and hidden_size " +
                                std::to_string(m.hidden_size) +
                                " is not a multiple of num_attention_heads");
      head_dim = m.hidden_size / m.num_attention_heads;
    }
    // K and V head sizes that differ (planner fields; HF configs rarely have them).
    KVS_CONFIG_READ(a.head_dim_k, config_u32_or(c, "k_head_dim", head_dim));
    KVS_CONFIG_READ(a.head_dim_v, config_u32_or(c, "v_head_dim", head_dim));
    LayerPattern pattern;
    KVS_CONFIG_READ(pattern, layer_pattern(c, n_layers, m.max_context));
    const Status built = build_layers(c, pattern, a, m.num_attention_heads, m);
    if (!built.is_ok()) return fail(built);
    const bool hybrid = std::any_of(pattern.roles.begin(), pattern.roles.end(), [](LayerRole r) {
      return r != LayerRole::kFullAttention && r != LayerRole::kSlidingWindow;
    });
    if (hybrid) m.notes.push_back(pattern_note(pattern));
    layer_roles = pattern.roles;
  }
#undef KVS_CONFIG_READ

  const std::string ckpt = checkpoint_dtype(c);
  if (ckpt == "f32")
    m.notes.push_back(
        "torch_dtype float32: engines run float32 checkpoints in 16 bits (vLLM's --dtype auto), "
        "so the weights (2 B per parameter), --kv-dtype auto and the states are bf16 "
        "(--weight-dtype f32 counts the checkpoint's 4 B)");
  // What an engine holds: a float32 checkpoint is loaded in 16 bits, like its KV.
  m.weight_dtype =
      normalize_dtype(config_string_or(top, "weight_dtype", ckpt == "f32" ? "bf16" : ckpt));
  auto params = config_uint(top, "num_parameters", uint64_t{1} << 50);
  if (!params.is_ok()) return fail(params.status());
  if (*params) {
    m.num_parameters = **params;
  } else if (m.hidden_size > 0) {
    m.num_parameters = estimate_parameters(c, layer_roles,
                                           {.hidden = m.hidden_size,
                                            .heads = m.num_attention_heads,
                                            .kv_heads = a.kv_heads,
                                            .head_dim_k = a.head_dim_k,
                                            .head_dim_v = a.head_dim_v,
                                            .num_experts = m.num_experts});
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
  KVS_ASSIGN_OR_RETURN(json j, parse_config_json(ss.str(), path));
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
