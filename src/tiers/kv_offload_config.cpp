#include "tiers/kv_offload_config.h"

#include <algorithm>

#include "kvcache/kv_pool_plan.h"
#include "tiers/kv_extent.h"
#include "tiers/redis_client.h"

namespace kvs {

uint64_t host_tier_blocks(uint64_t host_bytes, uint64_t block_bytes) {
  KVS_CHECK_MSG(block_bytes > 0, "host_tier_blocks of an empty block");
  return std::min<uint64_t>(host_bytes / block_bytes, kMaxPoolBlocks);
}

const char* offload_policy_name(OffloadPolicy p) {
  return p == OffloadPolicy::kWriteThrough ? "write-through" : "write-back";
}

Result<OffloadPolicy> parse_offload_policy(const std::string& name) {
  if (name == "write-back") return OffloadPolicy::kWriteBack;
  if (name == "write-through") return OffloadPolicy::kWriteThrough;
  return invalid_argument("--kv-offload-policy must be write-back or write-through, got '" + name +
                          "'");
}

Status KvOffloadConfig::validate() const {
  if (!disk_dir.empty() && disk_bytes == 0)
    return invalid_argument("--kv-offload-disk-bytes must be positive with --kv-offload-dir");
  if (extent_blocks == 0 || extent_blocks > kMaxExtentBlocks)
    return invalid_argument("--kv-offload-extent-blocks must be 1.." +
                            std::to_string(kMaxExtentBlocks));
  if (!remote_urls.empty() && remote_timeout_ms == 0)
    return invalid_argument("--kv-remote-timeout-ms must be positive");
  for (const std::string& url : remote_urls) KVS_RETURN_IF_ERROR(parse_redis_url(url).status());
  return Status::ok();
}

}  // namespace kvs
