#include "model/architecture.h"

#include <array>
#include <cmath>

namespace kvs {
namespace {

void describe_llama(const ModelSpec&, Architecture*) {}

void describe_gemma3(const ModelSpec& s, Architecture* a) {
  a->ffn = FfnKind::kGeGluTanh;
  a->rope_mode = RopeMode::kNeox;
  a->qk_norm = true;
  a->post_norms = true;
  // In f32, as transformers multiplies the embedding (and llama.cpp scales it).
  a->embedding_scale = std::sqrt(static_cast<float>(s.d_model));
  // scores = q . k / sqrt(query_pre_attn_scalar), which is head_dim for Gemma 3 270M, 1B, 4B
  // and 12B (transformers' config; the GGUF has no key for it, llama.cpp uses head_dim).
  a->attention_scale = 1.0f / std::sqrt(static_cast<float>(s.query_pre_attn_scalar));
  a->final_logit_softcap = s.final_logit_softcap;
}

constexpr std::array<EngineArchitecture, 2> kEngineArchitectures = {{
    {.name = "llama",
     .sliding_windows = false,
     .head_dim_is_embedding_over_heads = true,
     .describe = describe_llama},
    {.name = "gemma3",
     .sliding_windows = true,
     .head_dim_is_embedding_over_heads = false,
     .describe = describe_gemma3},
}};

}  // namespace

std::span<const EngineArchitecture> engine_architectures() { return kEngineArchitectures; }

const EngineArchitecture* find_engine_architecture(std::string_view name) {
  for (const EngineArchitecture& a : kEngineArchitectures)
    if (a.name == name) return &a;
  return nullptr;
}

std::string engine_architecture_names() {
  std::string out;
  for (size_t i = 0; i < kEngineArchitectures.size(); ++i) {
    if (i > 0) out += i + 1 == kEngineArchitectures.size() ? " and " : ", ";
    out += kEngineArchitectures[i].name;
  }
  return out;
}

Result<Architecture> architecture_of(const ModelSpec& s) {
  const EngineArchitecture* row = find_engine_architecture(s.architecture);
  if (row == nullptr)
    return unimplemented("model architecture '" + s.architecture + "' is not supported");
  Architecture a;
  a.name = s.architecture;
  a.attention_scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  for (const KvLayer& l : s.kv_layers) {
    const bool sliding = l.kind == KvLayerKind::kSliding;
    a.layers.push_back({.rope_base = sliding ? s.rope_freq_base_swa : s.rope_freq_base,
                        .window = sliding ? l.window : 0});
  }
  row->describe(s, &a);
  return a;
}

}  // namespace kvs
