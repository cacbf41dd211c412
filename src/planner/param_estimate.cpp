#include "planner/param_estimate.h"

#include <algorithm>
#include <initializer_list>
#include <string>

#include <nlohmann/json.hpp>

#include "planner/config_fields.h"
#include "planner/ssm_state.h"

namespace kvs {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxField = uint64_t{1} << 40;

// A size field, `fallback` when absent, null or malformed (an estimate never fails).
uint64_t field(const json& c, const char* key, uint64_t fallback = 0) {
  auto v = config_uint(c, key, kMaxField);
  return v.is_ok() && v->has_value() ? **v : fallback;
}

uint64_t first_field(const json& c, std::initializer_list<const char*> keys) {
  for (const char* key : keys)
    if (const uint64_t v = field(c, key); v > 0) return v;
  return 0;
}

bool one_of(const std::string& s, std::initializer_list<const char*> names) {
  return std::any_of(names.begin(), names.end(), [&](const char* n) { return s == n; });
}

// Whether layer i is in the list `key` names (Llama 4 moe_layers, Qwen mlp_only_layers).
bool listed(const json& c, const char* key, uint64_t i) {
  const auto it = c.find(key);
  if (it == c.end() || !it->is_array()) return false;
  return std::any_of(it->begin(), it->end(), [&](const json& v) {
    return v.is_number_unsigned() && v.get<uint64_t>() == i;
  });
}

// Families whose MLP is up/down only (no gate): GPT-2 style c_fc/c_proj, Falcon's
// dense_h_to_4h/dense_4h_to_h, Nemotron's squared-ReLU up/down.
bool ungated_mlp(const json& c, const std::string& type) {
  if (one_of(type,
             {"gpt2", "gpt_bigcode", "gpt_neox", "gptj", "opt", "bloom", "falcon", "RefinedWeb",
              "RefinedWebModel", "starcoder2", "phi", "nemotron", "nemotron_h"}))
    return true;
  return config_string_or(c, "mlp_hidden_act", config_string_or(c, "hidden_act", "")) == "relu2";
}

uint64_t mlp(uint64_t hidden, uint64_t inter, bool gated) {
  return (gated ? 3 : 2) * hidden * inter;
}

enum class Ffn { kNone, kDense, kMoe };

struct Estimator {
  const json& c;
  const ParamShape& s;
  std::string type = config_string_or(c, "model_type", "");
  bool gated = !ungated_mlp(c, type);
  std::string nemotron_pattern = config_string_or(c, "hybrid_override_pattern", "");

  // The dense MLP's width at layer i: a per-layer list (Gemma 3n), Llama 4's
  // intermediate_size_mlp (its intermediate_size is the experts'), or the usual spellings; GPT-2
  // style configs without one use 4 x hidden.
  uint64_t dense_intermediate(uint64_t i) const {
    if (const auto it = c.find("intermediate_size"); it != c.end() && it->is_array())
      return i < it->size() && (*it)[i].is_number_unsigned() ? (*it)[i].get<uint64_t>() : 0;
    if (one_of(type, {"llama4", "llama4_text"}))
      if (const uint64_t v = field(c, "intermediate_size_mlp"); v > 0) return v;
    if (const uint64_t v = first_field(c, {"intermediate_size", "n_inner", "ffn_hidden_size"});
        v > 0)
      return v;
    const bool gpt_style =
        c.contains("n_embd") || one_of(type, {"falcon", "RefinedWeb", "RefinedWebModel", "gpt2"});
    return gpt_style ? 4 * s.hidden : 0;
  }

  Ffn ffn(uint64_t i) const {
    if (type == "nemotron_h" && !nemotron_pattern.empty()) {
      const char k = i < nemotron_pattern.size() ? nemotron_pattern[i] : '-';
      return k == '-' ? Ffn::kDense : k == 'E' ? Ffn::kMoe : Ffn::kNone;
    }
    if (s.num_experts == 0) return Ffn::kDense;
    if (type == "jamba") {
      const uint64_t period = std::max<uint64_t>(1, field(c, "expert_layer_period", 2));
      return i % period == field(c, "expert_layer_offset", 1) ? Ffn::kMoe : Ffn::kDense;
    }
    if (one_of(type, {"llama4", "llama4_text"})) {
      if (c.contains("moe_layers") && c["moe_layers"].is_array())
        return listed(c, "moe_layers", i) ? Ffn::kMoe : Ffn::kDense;
      const uint64_t step = std::max<uint64_t>(1, field(c, "interleave_moe_layer_step", 1));
      return (i + 1) % step == 0 ? Ffn::kMoe : Ffn::kDense;
    }
    if (c.contains("first_k_dense_replace") || c.contains("moe_layer_freq")) {  // DeepSeek
      const uint64_t freq = std::max<uint64_t>(1, field(c, "moe_layer_freq", 1));
      return i >= field(c, "first_k_dense_replace") && i % freq == 0 ? Ffn::kMoe : Ffn::kDense;
    }
    if (listed(c, "mlp_only_layers", i)) return Ffn::kDense;  // Qwen MoE
    const uint64_t step = std::max<uint64_t>(1, field(c, "decoder_sparse_step", 1));
    return (i + 1) % step == 0 ? Ffn::kMoe : Ffn::kDense;
  }

  // Routed experts, router and shared experts of one MoE layer.
  uint64_t moe() const {
    const uint64_t expert = first_field(c, {"moe_intermediate_size", "intermediate_size"});
    uint64_t shared =
        first_field(c, {"moe_shared_expert_intermediate_size", "shared_expert_intermediate_size",
                        "shared_intermediate_size"});
    uint64_t n_shared = field(c, "n_shared_experts", shared > 0 ? 1 : 0);
    if (one_of(type, {"llama4", "llama4_text"})) n_shared = std::max<uint64_t>(n_shared, 1);
    if (shared == 0 && n_shared > 0) shared = expert;  // DeepSeek: n_shared x the expert size
    const uint64_t shared_gate = c.contains("shared_expert_intermediate_size") ? s.hidden : 0;
    return s.num_experts * mlp(s.hidden, expert, gated) + s.hidden * s.num_experts +
           n_shared * mlp(s.hidden, shared, gated) + shared_gate;
  }

  uint64_t attention() const {
    return s.hidden * s.heads * s.head_dim_k +
           s.hidden * s.kv_heads * (s.head_dim_k + s.head_dim_v) +
           s.heads * s.head_dim_v * s.hidden;
  }

  uint64_t mla() const {
    const uint64_t lora = field(c, "kv_lora_rank"), q_lora = field(c, "q_lora_rank");
    const uint64_t rope = field(c, "qk_rope_head_dim"), nope = field(c, "qk_nope_head_dim");
    const uint64_t v = field(c, "v_head_dim", nope);
    const uint64_t q_out = s.heads * (nope + rope);
    const uint64_t q = q_lora > 0 ? s.hidden * q_lora + q_lora + q_lora * q_out : s.hidden * q_out;
    const uint64_t kv = s.hidden * (lora + rope) + lora + lora * s.heads * (nope + v);
    return q + kv + s.heads * v * s.hidden;
  }

  uint64_t mamba1() const {
    auto d = mamba1_dims(c);
    if (!d.is_ok()) return 0;
    uint64_t dt_rank = first_field(c, {"mamba_dt_rank", "time_step_rank"});
    if (dt_rank == 0) dt_rank = (s.hidden + 15) / 16;  // "auto": ceil(hidden / 16)
    const bool conv_bias =
        config_bool_or(c, "mamba_conv_bias", config_bool_or(c, "use_conv_bias", true));
    const uint64_t in = d->d_inner;
    return s.hidden * 2 * in + in * d->d_conv + (conv_bias ? in : 0) +
           in * (dt_rank + 2 * d->d_state) + dt_rank * in + in + in * d->d_state + in +
           in * s.hidden;
  }

  uint64_t mamba2() const {
    auto d = mamba2_dims(c);
    if (!d.is_ok()) return 0;
    const uint64_t conv_dim = d->d_inner + 2 * d->groups * d->d_state;
    return s.hidden * (d->d_inner + conv_dim + d->heads) + conv_dim * (d->d_conv + 1) +
           3 * d->heads + d->d_inner + d->d_inner * s.hidden;
  }

  uint64_t lightning() const {
    const uint64_t inner = s.heads * s.head_dim_k;
    return 5 * s.hidden * inner + inner;
  }

  uint64_t gated_delta_net() const {
    const uint64_t kh = field(c, "linear_num_key_heads"), vh = field(c, "linear_num_value_heads");
    const uint64_t kd = field(c, "linear_key_head_dim"), vd = field(c, "linear_value_head_dim");
    const uint64_t conv_dim = 2 * kh * kd + vh * vd;
    return s.hidden * (conv_dim + vh * vd) + s.hidden * 2 * vh +
           conv_dim * field(c, "linear_conv_kernel_dim", 4) + 2 * vh + vd + vh * vd * s.hidden;
  }

  uint64_t mixer(LayerRole role) const {
    switch (role) {
      case LayerRole::kFullAttention:
      case LayerRole::kSlidingWindow:
      case LayerRole::kChunkedAttention:
      case LayerRole::kKvShared: return attention();
      case LayerRole::kMlaLatent: return mla();
      case LayerRole::kMamba1: return mamba1();
      case LayerRole::kMamba2: return mamba2();
      case LayerRole::kMamba2Parallel: return attention() + mamba2();
      case LayerRole::kLightning: return lightning();
      case LayerRole::kLinearAttention: return gated_delta_net();
      case LayerRole::kNoMixer:
      case LayerRole::kRecurrent: return 0;
    }
    return 0;
  }

  // Token and position embeddings, the LM head, and Gemma 3n's per-layer inputs and AltUp.
  uint64_t embeddings(uint64_t layers) const {
    const uint64_t vocab = field(c, "vocab_size");
    const bool tied = config_bool_or(c, "tie_word_embeddings", false);
    uint64_t n = vocab * s.hidden * (tied ? 1 : 2);
    if (one_of(type, {"gpt2", "gpt_bigcode"}))
      n += first_field(c, {"n_positions", "max_position_embeddings"}) * s.hidden;
    if (const uint64_t per_layer = field(c, "hidden_size_per_layer_input"); per_layer > 0) {
      n += field(c, "vocab_size_per_layer_input", vocab) * layers * per_layer;  // the PLE table
      n += s.hidden * layers * per_layer;                                       // its projection
    }
    if (const uint64_t altup = field(c, "altup_num_inputs"); altup > 1)
      n += 2 * (altup - 1) * s.hidden * s.hidden;  // AltUp in and out projections
    return n;
  }

  // Per-layer extras of Gemma 3n: the per-layer input gate and projection, LAuReL's two ranks.
  uint64_t layer_extras() const {
    return 2 * s.hidden * field(c, "hidden_size_per_layer_input") +
           2 * s.hidden * field(c, "laurel_rank");
  }
};

}  // namespace

uint64_t estimate_parameters(const json& c, const std::vector<LayerRole>& roles,
                             const ParamShape& shape) {
  const Estimator e{.c = c, .s = shape};
  const uint64_t layers = roles.size();
  uint64_t total = e.embeddings(layers) + shape.hidden;  // + the final norm
  for (uint64_t i = 0; i < layers; ++i) {
    total += e.mixer(roles[i]) + e.layer_extras() + 2 * shape.hidden;  // + the two norms
    switch (e.ffn(i)) {
      case Ffn::kNone: break;
      case Ffn::kDense: total += mlp(shape.hidden, e.dense_intermediate(i), e.gated); break;
      case Ffn::kMoe: total += e.moe(); break;
    }
  }
  return total;
}

}  // namespace kvs
