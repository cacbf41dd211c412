// model_from_gguf: the planner's model from a GGUF file's metadata (llama.cpp key names).
#include <algorithm>
#include <filesystem>

#include "model/gguf_file.h"
#include "planner/model_config.h"

namespace kvs {
namespace {

constexpr uint64_t kMaxDim = 1u << 24;

// A per-layer integer key that may be a scalar or an array with one entry per layer.
Result<std::vector<uint32_t>> per_layer(const GgufFile& f, const std::string& key, size_t layers,
                                        std::optional<uint32_t> fallback) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) {
    if (!fallback) return not_found("metadata key '" + key + "' is missing");
    return std::vector<uint32_t>(layers, *fallback);
  }
  std::vector<uint32_t> out;
  if (v->type() == GgufType::kArray) {
    KVS_ASSIGN_OR_RETURN(auto arr, f.get_int_array(key));
    if (arr.size() != layers)
      return invalid_argument("metadata key '" + key + "' has " + std::to_string(arr.size()) +
                              " entries for " + std::to_string(layers) + " layers");
    for (int64_t x : arr) {
      if (x < 0 || static_cast<uint64_t>(x) > kMaxDim)
        return invalid_argument("metadata key '" + key + "' has an implausible entry");
      out.push_back(static_cast<uint32_t>(x));
    }
    return out;
  }
  KVS_ASSIGN_OR_RETURN(uint64_t x, f.get_uint(key));
  if (x > kMaxDim) return invalid_argument("metadata key '" + key + "' is implausibly large");
  return std::vector<uint32_t>(layers, static_cast<uint32_t>(x));
}

Result<uint32_t> u32_or(const GgufFile& f, const std::string& key, uint32_t fallback) {
  if (f.find(key) == nullptr) return fallback;
  KVS_ASSIGN_OR_RETURN(uint64_t x, f.get_uint(key));
  if (x > kMaxDim) return invalid_argument("metadata key '" + key + "' is implausibly large");
  return static_cast<uint32_t>(x);
}

}  // namespace

Result<PlannerModel> model_from_gguf(const GgufFile& f, const std::string& origin) {
  auto body = [&]() -> Result<PlannerModel> {
    PlannerModel m;
    KVS_ASSIGN_OR_RETURN(m.architecture, f.get_string("general.architecture"));
    const std::string a = m.architecture + ".";
    m.name = std::filesystem::path(origin).filename().string();
    if (auto n = f.get_string("general.name"); n.is_ok()) m.display_name = *n;
    if (m.display_name.empty()) m.display_name = m.name;
    m.source = origin + " (GGUF metadata)";
    KVS_ASSIGN_OR_RETURN(uint64_t n_layers, f.get_uint(a + "block_count"));
    if (n_layers == 0 || n_layers > 4096)
      return invalid_argument("block_count " + std::to_string(n_layers) + " is implausible");
    KVS_ASSIGN_OR_RETURN(m.hidden_size, u32_or(f, a + "embedding_length", 0));
    KVS_ASSIGN_OR_RETURN(m.max_context, u32_or(f, a + "context_length", 0));
    KVS_ASSIGN_OR_RETURN(m.num_experts, u32_or(f, a + "expert_count", 0));

    KVS_ASSIGN_OR_RETURN(uint32_t lora, u32_or(f, a + "attention.kv_lora_rank", 0));
    if (lora > 0) {
      KVS_ASSIGN_OR_RETURN(uint32_t rope, u32_or(f, a + "rope.dimension_count", 0));
      m.layers.assign(n_layers, KvLayer::mla(lora, rope));
    } else {
      KVS_ASSIGN_OR_RETURN(auto heads, per_layer(f, a + "attention.head_count", n_layers, {}));
      m.num_attention_heads = *std::max_element(heads.begin(), heads.end());
      KVS_ASSIGN_OR_RETURN(auto kv_heads,
                           per_layer(f, a + "attention.head_count_kv", n_layers, {}));
      if (f.find(a + "attention.head_count_kv") == nullptr) kv_heads = heads;
      uint32_t default_dim = 0;
      if (m.num_attention_heads > 0 && m.hidden_size % m.num_attention_heads == 0)
        default_dim = m.hidden_size / m.num_attention_heads;
      KVS_ASSIGN_OR_RETURN(uint32_t dk, u32_or(f, a + "attention.key_length", default_dim));
      KVS_ASSIGN_OR_RETURN(uint32_t dv, u32_or(f, a + "attention.value_length", dk));
      if (dk == 0 || dv == 0)
        return invalid_argument(
            "cannot tell the head dimension (no attention.key_length and "
            "embedding_length is not a multiple of head_count)");
      KVS_ASSIGN_OR_RETURN(uint32_t window, u32_or(f, a + "attention.sliding_window", 0));
      KVS_ASSIGN_OR_RETURN(uint32_t interval, u32_or(f, a + "full_attention_interval", 0));

      // Which layers are windowed: an explicit per-layer pattern, Gemma's fixed patterns, or all.
      std::vector<bool> sliding(n_layers, window > 0);
      const std::string pattern_key = a + "attention.sliding_window_pattern";
      if (const GgufValue* pv = f.find(pattern_key); pv != nullptr && window > 0) {
        if (pv->type() == GgufType::kArray) {
          if (pv->array_size() != n_layers || pv->array_type() != GgufType::kBool)
            return invalid_argument("metadata key '" + pattern_key +
                                    "' must hold one bool per layer");
          for (uint64_t i = 0; i < n_layers; ++i) sliding[i] = pv->element(i).to_bool().value();
        } else {
          KVS_ASSIGN_OR_RETURN(uint64_t p, f.get_uint(pattern_key));
          for (uint64_t i = 0; i < n_layers; ++i) sliding[i] = p == 0 || (i + 1) % p != 0;
        }
      } else if (m.architecture == "gemma2" && window > 0) {
        for (uint64_t i = 0; i < n_layers; ++i) sliding[i] = i % 2 == 0;
      } else if (m.architecture == "gemma3" && window > 0) {
        for (uint64_t i = 0; i < n_layers; ++i) sliding[i] = (i + 1) % 6 != 0;
      }

      uint64_t state = 0;
      if (interval > 0) {
        // Gated delta net (Qwen3-Next): conv window over q/k/v plus the recurrent state, in f32
        // as llama.cpp keeps recurrent states.
        KVS_ASSIGN_OR_RETURN(uint32_t conv, u32_or(f, a + "ssm.conv_kernel", 4));
        KVS_ASSIGN_OR_RETURN(uint32_t inner, u32_or(f, a + "ssm.inner_size", 0));
        KVS_ASSIGN_OR_RETURN(uint32_t d_state, u32_or(f, a + "ssm.state_size", 0));
        KVS_ASSIGN_OR_RETURN(uint32_t groups, u32_or(f, a + "ssm.group_count", 0));
        const uint64_t conv_dim = uint64_t{2} * groups * d_state + inner;
        state = 4 * (uint64_t{conv > 0 ? conv - 1 : 0} * conv_dim + uint64_t{d_state} * inner);
      }
      for (uint64_t i = 0; i < n_layers; ++i) {
        if (interval > 0 && (i + 1) % interval != 0) {
          m.layers.push_back(KvLayer::no_kv(state));
        } else if (kv_heads[i] == 0) {
          m.layers.push_back(KvLayer::no_kv(0));  // a recurrent layer with no attention
        } else if (sliding[i]) {
          m.layers.push_back(KvLayer::sliding(kv_heads[i], dk, dv, window));
        } else {
          m.layers.push_back(KvLayer::full(kv_heads[i], dk, dv));
        }
      }
    }
    uint64_t params = 0;
    for (const GgufTensorInfo& t : f.tensors()) params += t.num_elements();
    m.num_parameters = params;
    m.weight_bytes = f.total_tensor_bytes();
    m.weight_dtype = "gguf";
    return m;
  };
  auto r = body();
  if (!r.is_ok()) return Status(r.status().code(), origin + ": " + r.status().message());
  return r;
}

}  // namespace kvs
