// model_from_gguf: the planner's model from a GGUF file's metadata. The shape comes from the one
// GGUF reader (model/model_spec.h), the same the engine loads with; the planner adds the sizes.
#include <filesystem>

#include "model/gguf_file.h"
#include "model/model_spec.h"
#include "planner/model_config.h"

namespace kvs {

Result<PlannerModel> model_from_gguf(const GgufFile& f, const std::string& origin) {
  auto spec = model_spec_from_gguf(f);
  if (!spec.is_ok()) return Status(spec.status().code(), origin + ": " + spec.status().message());
  PlannerModel m;
  m.architecture = spec->architecture;
  m.name = std::filesystem::path(origin).filename().string();
  m.display_name = spec->name.empty() ? m.name : spec->name;
  m.source = origin + " (GGUF metadata)";
  m.layers = spec->kv_layers;
  for (size_t i = 0; i < m.layers.size(); ++i) {
    LayerRole role = default_layer_role(m.layers[i]);
    if (spec->kv_shared_from > 0 && i >= spec->kv_shared_from) role = LayerRole::kKvShared;
    if (role == LayerRole::kSlidingWindow && spec->window_chunked)
      role = LayerRole::kChunkedAttention;
    m.roles.push_back(role);
  }
  m.num_attention_heads = spec->n_heads;
  m.hidden_size = spec->d_model;
  m.max_context = spec->context_length;
  m.num_experts = spec->num_experts;
  m.vocab_size = spec->vocab_size;
  m.tied_embeddings = f.find_tensor("output.weight") == nullptr;
  uint64_t params = 0;
  for (const GgufTensorInfo& t : f.tensors()) params += t.num_elements();
  m.num_parameters = params;
  m.weight_bytes = f.total_tensor_bytes();
  m.weight_dtype = "gguf";
  return m;
}

}  // namespace kvs
