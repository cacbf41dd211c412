#include "model/model_spec.h"

#include "model/gguf_file.h"

namespace kvs {

static Result<uint32_t> get_u32(const GgufFile& f, const std::string& key) {
  KVS_ASSIGN_OR_RETURN(uint64_t v, f.get_uint(key));
  if (v == 0 || v > (1u << 30))
    return invalid_argument("metadata key '" + key + "' has an implausible value " +
                            std::to_string(v));
  return static_cast<uint32_t>(v);
}

Result<ModelSpec> model_spec_from_gguf(const GgufFile& f) {
  ModelSpec s;
  KVS_ASSIGN_OR_RETURN(s.architecture, f.get_string("general.architecture"));
  if (s.architecture != "llama")
    return unimplemented("model architecture '" + s.architecture +
                         "' is not supported (kvserve runs llama-architecture models)");
  if (auto name = f.get_string("general.name"); name.is_ok()) s.name = *name;
  const std::string a = s.architecture + ".";
  KVS_ASSIGN_OR_RETURN(s.n_layers, get_u32(f, a + "block_count"));
  KVS_ASSIGN_OR_RETURN(s.d_model, get_u32(f, a + "embedding_length"));
  KVS_ASSIGN_OR_RETURN(s.n_heads, get_u32(f, a + "attention.head_count"));
  KVS_ASSIGN_OR_RETURN(s.ffn_dim, get_u32(f, a + "feed_forward_length"));
  KVS_ASSIGN_OR_RETURN(s.context_length, get_u32(f, a + "context_length"));
  s.n_kv_heads = s.n_heads;
  if (f.find(a + "attention.head_count_kv") != nullptr) {
    KVS_ASSIGN_OR_RETURN(s.n_kv_heads, get_u32(f, a + "attention.head_count_kv"));
  }
  if (s.d_model % s.n_heads != 0)
    return invalid_argument("embedding length " + std::to_string(s.d_model) +
                            " is not a multiple of the head count " + std::to_string(s.n_heads));
  if (s.n_heads % s.n_kv_heads != 0)
    return invalid_argument("head count " + std::to_string(s.n_heads) +
                            " is not a multiple of the KV head count " +
                            std::to_string(s.n_kv_heads));
  s.head_dim = s.d_model / s.n_heads;
  if (f.find(a + "attention.key_length") != nullptr) {
    KVS_ASSIGN_OR_RETURN(uint32_t kl, get_u32(f, a + "attention.key_length"));
    if (kl != s.head_dim)
      return unimplemented("attention.key_length != embedding/heads is not supported");
  }
  s.rope_dim = s.head_dim;
  if (f.find(a + "rope.dimension_count") != nullptr) {
    KVS_ASSIGN_OR_RETURN(s.rope_dim, get_u32(f, a + "rope.dimension_count"));
  }
  if (s.rope_dim > s.head_dim || s.rope_dim % 2 != 0)
    return invalid_argument("rope.dimension_count " + std::to_string(s.rope_dim) +
                            " is invalid for head dim " + std::to_string(s.head_dim));
  if (f.find(a + "rope.freq_base") != nullptr) {
    KVS_ASSIGN_OR_RETURN(double base, f.get_float(a + "rope.freq_base"));
    s.rope_freq_base = static_cast<float>(base);
  }
  KVS_ASSIGN_OR_RETURN(double eps, f.get_float(a + "attention.layer_norm_rms_epsilon"));
  s.norm_eps = static_cast<float>(eps);
  if (f.find(a + "vocab_size") != nullptr) {
    KVS_ASSIGN_OR_RETURN(s.vocab_size, get_u32(f, a + "vocab_size"));
  } else {
    const GgufTensorInfo* emb = f.find_tensor("token_embd.weight");
    if (emb == nullptr || emb->dims.size() != 2)
      return not_found("tensor 'token_embd.weight' is missing");
    s.vocab_size = static_cast<uint32_t>(emb->dims[1]);
  }
  return s;
}

}  // namespace kvs
