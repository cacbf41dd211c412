#include "planner/engine_pool.h"

#include "core/byte_size.h"
#include "kvcache/kv_geometry.h"

namespace kvs {

Result<EnginePool> plan_engine_pool(const ModelSpec& spec, uint64_t kv_cache_memory,
                                    uint32_t block_size, KvDtype k_dtype, KvDtype v_dtype) {
  // The engine's limits (engine.cpp size_kv_pool), so both refuse the same inputs.
  if (block_size < 1 || block_size > 256)
    return invalid_argument("block size must be between 1 and 256, got " +
                            std::to_string(block_size));
  const KvUniformShape shape = spec.kv_shape(k_dtype, v_dtype);
  KVS_RETURN_IF_ERROR(validate_kv_shape(KvModelShape::uniform(shape)));
  const KvTokenBytes tb = kv_token_bytes(shape);
  EnginePool p;
  p.bytes_per_token = tb.bytes_per_token;
  p.formula = tb.formula;
  p.block_bytes = uint64_t{block_size} * p.bytes_per_token;
  p.num_blocks = kv_cache_memory / p.block_bytes;
  if (p.num_blocks == 0)
    return invalid_argument("KV cache memory " + format_bytes_binary(kv_cache_memory) +
                            " is smaller than one block (" + format_thousands(p.block_bytes) +
                            " B)");
  if (p.num_blocks > (uint64_t{1} << 31))
    return invalid_argument("KV cache memory is too large for the engine's block ids");
  p.num_tokens = p.num_blocks * block_size;
  p.pool_bytes = p.num_blocks * p.block_bytes;
  return p;
}

Result<ModelSpec> engine_spec_from_planner_model(const PlannerModel& m) {
  if (m.layers.empty()) return invalid_argument(m.name + ": no layers");
  const KvLayer& first = m.layers.front();
  for (const KvLayer& l : m.layers)
    if (l.kind != KvLayerKind::kFull || !(l == first) || l.head_dim_k != l.head_dim_v)
      return unimplemented(m.name +
                           ": the engine runs uniform full-attention models only (no windows, "
                           "MLA, linear layers or K/V head sizes that differ)");
  ModelSpec s;
  s.architecture = m.architecture;
  s.name = m.name;
  s.n_layers = static_cast<uint32_t>(m.layers.size());
  s.n_heads = m.num_attention_heads;
  s.n_kv_heads = first.kv_heads;
  s.head_dim = first.head_dim_k;
  s.d_model = m.hidden_size;
  return s;
}

}  // namespace kvs
