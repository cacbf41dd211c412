#include "kvcache/kv_pool_plan.h"

#include <string>

#include "core/byte_size.h"

namespace kvs {

Result<KvPoolPlan> plan_kv_pool(const KvUniformShape& shape, uint64_t memory, uint32_t block_size) {
  if (block_size < 1 || block_size > kMaxBlockSize)
    return invalid_argument("--block-size must be between 1 and " + std::to_string(kMaxBlockSize) +
                            ", got " + std::to_string(block_size));
  KVS_RETURN_IF_ERROR(validate_kv_shape(KvModelShape::uniform(shape)));
  KvPoolPlan p;
  p.shape = shape;
  p.token_bytes = kv_token_bytes(shape);
  p.block_size = block_size;
  p.block_bytes = p.token_bytes.bytes_per_token * block_size;
  const uint64_t blocks = memory / p.block_bytes;
  if (blocks == 0)
    return invalid_argument("--kv-cache-memory " + format_bytes_binary(memory) + " (" +
                            format_thousands(memory) + " B) holds no block: one block of " +
                            std::to_string(block_size) + " tokens needs " +
                            format_thousands(p.block_bytes) + " B");
  if (blocks > kMaxPoolBlocks)
    return invalid_argument("--kv-cache-memory is too large: more than " +
                            format_thousands(kMaxPoolBlocks) + " blocks");
  p.num_blocks = static_cast<uint32_t>(blocks);
  p.num_tokens = blocks * block_size;
  p.pool_bytes = blocks * p.block_bytes;
  return p;
}

}  // namespace kvs
