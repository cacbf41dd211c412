// CapacityLine: the dashboard's answer to "how many requests fit": KV bytes per token with the
// formula's numbers, the pool (bytes, blocks, tokens), the maximum concurrency at
// --max-model-len, and what the planner's serving levers would give on the same memory:
// K and V in fp8 (e4m3) or int4, or half the --max-model-len. Every number comes from
// plan_kv_pool (kv_pool_plan.h), the function that sized this engine's pool, so the dashboard,
// the startup report and `kvserve plan` agree to the byte. Which levers are offered and when one
// does not apply is the planner's rule (planner/kv_format_levers.h); they are priced here on the
// engine's pool plan.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvcache/kv_pool_plan.h"

namespace kvs {

struct CapacityLever {
  std::string name;    // "KV fp8 (e4m3)"
  std::string change;  // "--kv-cache-dtype fp8_e4m3"
  bool applicable = true;
  std::string why_not;  // when !applicable
  uint64_t bytes_per_token = 0;
  uint32_t num_blocks = 0;
  uint64_t fully_reserved = 0;  // requests of max_model_len tokens that fit, whole blocks
  int64_t more_requests = 0;    // fully_reserved minus the pool as configured
};

struct CapacityLine {
  std::string formula;  // "30 x 2 x 3 x 64 x 2 = 23,040 B"
  std::string k_dtype, v_dtype;
  // Per-layer formats (quant/kv_layer_formats.h): " + layers K 18=int4_chan; V 1=int4_had", or
  // "" for none. The format levers keep them (a lever whose keys they cannot group says why).
  std::string layer_formats;
  uint64_t bytes_per_token = 0;
  uint64_t kv_cache_memory = 0;  // the budget (--kv-cache-memory)
  // Taken from the budget before the blocks (kv_pool_plan.h): the per-channel keys' f16 tails and
  // the --kv-recent-window rings (recent_window tokens each), for --max-num-seqs sequences.
  uint64_t key_tail_bytes = 0;
  uint32_t recent_window = 0;
  uint64_t recent_window_bytes = 0;
  uint32_t max_num_seqs = 0;
  uint64_t pool_bytes = 0;
  uint32_t num_blocks = 0;
  uint32_t block_size = 0;
  uint64_t pool_tokens = 0;
  uint32_t max_model_len = 0;
  // Blocks one max_model_len request holds at its peak: ceil(max_model_len / block_size) for a
  // uniform model, less with sliding-window layers (sequence_footprint).
  uint64_t blocks_per_request = 0;
  double max_concurrency = 0;   // num_blocks / blocks_per_request
  uint64_t fully_reserved = 0;  // num_blocks / blocks_per_request
  std::vector<CapacityLever> levers;
};

// Precondition: max_model_len >= 1 and `pool` came from plan_kv_pool(.., kv_cache_memory, ..).
// prefill_chunk: the engine's max_num_batched_tokens (what a sliding-window group holds beyond
// its window while a prompt is prefilled; kv_pool_plan.h, sequence_footprint).
[[nodiscard]] CapacityLine capacity_line(const KvPoolPlan& pool, uint64_t kv_cache_memory,
                                         uint32_t max_model_len, uint32_t prefill_chunk = 512);
[[nodiscard]] nlohmann::json capacity_json(const CapacityLine& line);

}  // namespace kvs
