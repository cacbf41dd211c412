// engine_pool: what the engine allocates for a given KV memory budget, computed the way the
// engine computes it, so `kvserve plan` and `kvserve serve`/`generate` agree to the byte:
//
//   bytes_per_token = kv_token_bytes(spec.kv_shape(k, v)).bytes_per_token
//   num_blocks      = floor(kv_cache_memory / (block_size x bytes_per_token))
//   num_tokens      = num_blocks x block_size
//   pool_bytes      = num_blocks x block_size x bytes_per_token
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "kvcache/kv_format.h"
#include "model/model_spec.h"
#include "planner/model_config.h"

namespace kvs {

struct EnginePool {
  uint64_t bytes_per_token = 0;
  uint64_t block_bytes = 0;  // block_size x bytes_per_token
  uint64_t num_blocks = 0;
  uint64_t num_tokens = 0;
  uint64_t pool_bytes = 0;
  std::string formula;  // kv_token_bytes' formula with the model's numbers
};

// kInvalidArgument (as the engine) for block_size outside 1..256, a head dim the format cannot
// hold, or a budget smaller than one block.
[[nodiscard]] Result<EnginePool> plan_engine_pool(const ModelSpec& spec, uint64_t kv_cache_memory,
                                                  uint32_t block_size, KvDtype k_dtype,
                                                  KvDtype v_dtype);

// The engine's ModelSpec for a planner model, when the engine can run its shape (uniform full
// attention, K and V head sizes equal); kUnimplemented naming what it cannot run otherwise. For a
// GGUF prefer model_spec_from_gguf, the engine's own reader.
[[nodiscard]] Result<ModelSpec> engine_spec_from_planner_model(const PlannerModel& model);

}  // namespace kvs
