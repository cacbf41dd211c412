// KvPoolPlan: how a KV memory budget becomes a paged pool. The one place that sizes the pool:
// the engine allocates what it says, `kvserve serve` prints it before it starts, and
// `kvserve plan` predicts with it, so all three agree to the byte:
//
//   bytes_per_token = kv_token_bytes(shape).bytes_per_token          (kv_geometry, THE formula)
//   block_bytes     = block_size x bytes_per_token
//   num_blocks      = floor(kv_cache_memory / block_bytes)
//   num_tokens      = num_blocks x block_size
//   pool_bytes      = num_blocks x block_bytes
#pragma once

#include <cstdint>

#include "core/status.h"
#include "kvcache/kv_geometry.h"

namespace kvs {

inline constexpr uint32_t kMaxBlockSize = 256;
// Block ids are 32-bit with one value reserved (BlockId::invalid); stay well below.
inline constexpr uint64_t kMaxPoolBlocks = uint64_t{1} << 31;

struct KvPoolPlan {
  KvUniformShape shape;
  KvTokenBytes token_bytes;  // per layer K / V bytes, bytes per token, the formula's text
  uint32_t block_size = 0;
  uint64_t block_bytes = 0;
  uint32_t num_blocks = 0;
  uint64_t num_tokens = 0;
  uint64_t pool_bytes = 0;
};

// invalid_argument, naming the flag, for a block size outside 1..kMaxBlockSize, a head dim the
// formats cannot hold, a budget smaller than one block or one with too many blocks.
[[nodiscard]] Result<KvPoolPlan> plan_kv_pool(const KvUniformShape& shape, uint64_t kv_cache_memory,
                                              uint32_t block_size);

}  // namespace kvs
