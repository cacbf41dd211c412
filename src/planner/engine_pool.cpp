#include "planner/engine_pool.h"

#include "core/byte_size.h"
#include "kvcache/kv_geometry.h"

namespace kvs {

Result<EnginePool> plan_engine_pool(const ModelSpec& spec, uint64_t kv_cache_memory,
                                    uint32_t block_size, KvDtype k_dtype, KvDtype v_dtype) {
  if (block_size == 0) return invalid_argument("block size must be at least 1");
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
  p.num_tokens = p.num_blocks * block_size;
  p.pool_bytes = p.num_blocks * p.block_bytes;
  return p;
}

}  // namespace kvs
