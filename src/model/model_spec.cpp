#include "model/model_spec.h"

#include <algorithm>
#include <optional>

#include "model/engine_architectures.h"
#include "model/gguf_file.h"
#include "model/gguf_window_pattern.h"

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

Result<float> f32_or(const GgufFile& f, const std::string& key, float fallback) {
  if (f.find(key) == nullptr) return fallback;
  KVS_ASSIGN_OR_RETURN(double x, f.get_float(key));
  return static_cast<float>(x);
}

}  // namespace

bool ModelSpec::uniform_full_attention() const {
  if (kv_layers.empty()) return false;
  const KvLayer& first = kv_layers.front();
  return std::all_of(kv_layers.begin(), kv_layers.end(),
                     [&](const KvLayer& l) { return l.kind == KvLayerKind::kFull && l == first; });
}

Result<ModelSpec> model_spec_from_gguf(const GgufFile& f) {
  ModelSpec s;
  KVS_ASSIGN_OR_RETURN(s.architecture, f.get_string("general.architecture"));
  if (auto name = f.get_string("general.name"); name.is_ok()) s.name = *name;
  const std::string a = s.architecture + ".";
  KVS_ASSIGN_OR_RETURN(uint64_t n_layers, f.get_uint(a + "block_count"));
  if (n_layers == 0 || n_layers > 4096)
    return invalid_argument("block_count " + std::to_string(n_layers) + " is implausible");
  s.n_layers = static_cast<uint32_t>(n_layers);
  KVS_ASSIGN_OR_RETURN(s.d_model, u32_or(f, a + "embedding_length", 0));
  KVS_ASSIGN_OR_RETURN(s.context_length, u32_or(f, a + "context_length", 0));
  KVS_ASSIGN_OR_RETURN(s.num_experts, u32_or(f, a + "expert_count", 0));
  KVS_ASSIGN_OR_RETURN(s.ffn_dim, u32_or(f, a + "feed_forward_length", 0));
  KVS_ASSIGN_OR_RETURN(s.norm_eps, f32_or(f, a + "attention.layer_norm_rms_epsilon", 1e-5f));
  KVS_ASSIGN_OR_RETURN(s.rope_freq_base, f32_or(f, a + "rope.freq_base", 10000.0f));
  KVS_ASSIGN_OR_RETURN(s.rope_freq_base_swa,
                       f32_or(f, a + "rope.freq_base_swa",
                              s.architecture == "gemma3" ? 10000.0f : s.rope_freq_base));
  KVS_ASSIGN_OR_RETURN(s.final_logit_softcap, f32_or(f, a + "final_logit_softcapping", 0.0f));

  KVS_ASSIGN_OR_RETURN(uint32_t lora, u32_or(f, a + "attention.kv_lora_rank", 0));
  if (lora > 0) {
    KVS_ASSIGN_OR_RETURN(uint32_t rope, u32_or(f, a + "rope.dimension_count", 0));
    s.rope_dim = rope;
    s.kv_layers.assign(n_layers, KvLayer::mla(lora, rope));
    KVS_ASSIGN_OR_RETURN(s.n_heads, u32_or(f, a + "attention.head_count", 0));
  } else {
    KVS_ASSIGN_OR_RETURN(auto heads, per_layer(f, a + "attention.head_count", n_layers, {}));
    s.n_heads = *std::max_element(heads.begin(), heads.end());
    // No head_count_kv: multi-head attention, one KV head per attention head.
    std::vector<uint32_t> kv_heads = heads;
    if (f.find(a + "attention.head_count_kv") != nullptr) {
      KVS_ASSIGN_OR_RETURN(kv_heads, per_layer(f, a + "attention.head_count_kv", n_layers, {}));
    }
    uint32_t default_dim = 0;
    if (s.n_heads > 0 && s.d_model % s.n_heads == 0) default_dim = s.d_model / s.n_heads;
    KVS_ASSIGN_OR_RETURN(s.head_dim, u32_or(f, a + "attention.key_length", default_dim));
    KVS_ASSIGN_OR_RETURN(s.head_dim_v, u32_or(f, a + "attention.value_length", s.head_dim));
    if (s.head_dim == 0 || s.head_dim_v == 0)
      return invalid_argument(
          "cannot tell the head dimension (no attention.key_length and "
          "embedding_length is not a multiple of head_count)");
    KVS_ASSIGN_OR_RETURN(s.rope_dim, u32_or(f, a + "rope.dimension_count", s.head_dim));
    KVS_ASSIGN_OR_RETURN(s.query_pre_attn_scalar,
                         u32_or(f, a + "attention.query_pre_attn_scalar", s.head_dim));
    // Which layers are windowed: the file's pattern, else llama.cpp's per-architecture table.
    KVS_ASSIGN_OR_RETURN(GgufWindowLayout layout, gguf_window_layout(f, s.architecture, n_layers));
    const uint32_t window = layout.window;
    s.kv_shared_from = layout.kv_shared_from;
    s.window_chunked = layout.chunked;
    const std::vector<bool>& sliding = layout.windowed;
    KVS_ASSIGN_OR_RETURN(uint32_t interval, u32_or(f, a + "full_attention_interval", 0));
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
        s.kv_layers.push_back(KvLayer::no_kv(state));
      } else if (layout.kv_shared_from > 0 && i >= layout.kv_shared_from) {
        s.kv_layers.push_back(KvLayer::no_kv(0));  // reuses an earlier layer's KV (gemma3n)
      } else if (kv_heads[i] == 0) {
        s.kv_layers.push_back(KvLayer::no_kv(0));  // a recurrent layer with no attention
      } else if (sliding[i]) {
        s.kv_layers.push_back(KvLayer::sliding(kv_heads[i], s.head_dim, s.head_dim_v, window));
      } else {
        s.kv_layers.push_back(KvLayer::full(kv_heads[i], s.head_dim, s.head_dim_v));
      }
      if (s.n_kv_heads == 0 && kv_heads[i] != 0 && s.kv_layers.back().kind != KvLayerKind::kNoKv)
        s.n_kv_heads = kv_heads[i];
    }
  }
  if (const GgufValue* v = f.find(a + "vocab_size"); v != nullptr) {
    KVS_ASSIGN_OR_RETURN(s.vocab_size, u32_or(f, a + "vocab_size", 0));
  } else if (const GgufTensorInfo* emb = f.find_tensor("token_embd.weight");
             emb != nullptr && emb->dims.size() == 2 && emb->dims[1] <= kMaxDim) {
    s.vocab_size = static_cast<uint32_t>(emb->dims[1]);
  }
  return s;
}

Status check_engine_support(const ModelSpec& s) {
  const EngineArchitecture* arch = find_engine_architecture(s.architecture);
  if (arch == nullptr)
    return unimplemented("model architecture '" + s.architecture +
                         "' is not supported (kvserve runs " + engine_architecture_names() +
                         " models)");
  if (!arch->sliding_windows && !s.uniform_full_attention())
    return unimplemented("the engine runs " + s.architecture +
                         " models with uniform full attention only");
  for (const KvLayer& l : s.kv_layers) {
    if (l.kind != KvLayerKind::kFull && l.kind != KvLayerKind::kSliding)
      return unimplemented(std::string("the engine cannot run ") + kv_layer_kind_name(l.kind) +
                           " layers");
    if (l.kv_heads != s.n_kv_heads || l.head_dim_k != s.head_dim || l.head_dim_v != s.head_dim)
      return unimplemented("the engine runs layers of equal KV heads and head dims only");
  }
  const auto need = [](uint32_t v, const char* key) -> Status {
    if (v == 0) return not_found(std::string("metadata key '") + key + "' is missing or zero");
    return Status::ok();
  };
  KVS_RETURN_IF_ERROR(need(s.d_model, "embedding_length"));
  KVS_RETURN_IF_ERROR(need(s.n_heads, "attention.head_count"));
  KVS_RETURN_IF_ERROR(need(s.ffn_dim, "feed_forward_length"));
  KVS_RETURN_IF_ERROR(need(s.context_length, "context_length"));
  KVS_RETURN_IF_ERROR(need(s.vocab_size, "vocab_size (or tensor token_embd.weight)"));
  KVS_RETURN_IF_ERROR(need(s.query_pre_attn_scalar, "attention.query_pre_attn_scalar"));
  if (s.n_heads % s.n_kv_heads != 0)
    return invalid_argument("head count " + std::to_string(s.n_heads) +
                            " is not a multiple of the KV head count " +
                            std::to_string(s.n_kv_heads));
  if (s.head_dim_v != s.head_dim)
    return unimplemented("attention.value_length != key_length is not supported");
  // llama: head_dim = embedding / heads (the converters' layout); Gemma states key_length.
  if (arch->head_dim_is_embedding_over_heads && s.head_dim != s.d_model / s.n_heads)
    return unimplemented("attention.key_length != embedding/heads is not supported for " +
                         s.architecture);
  if (s.rope_dim > s.head_dim || s.rope_dim % 2 != 0)
    return invalid_argument("rope.dimension_count " + std::to_string(s.rope_dim) +
                            " is invalid for head dim " + std::to_string(s.head_dim));
  return Status::ok();
}

}  // namespace kvs
