#include "planner/tier_capacity.h"

#include "tiers/kv_extent.h"
#include "tiers/kv_offload_config.h"

namespace kvs {

uint64_t disk_tier_blocks(uint64_t disk_bytes, uint64_t block_bytes, uint32_t block_size,
                          uint32_t extent_blocks) {
  if (block_bytes == 0 || extent_blocks == 0) return 0;
  const auto extent_bytes = [&](uint32_t n) {
    return extent_header_size(n, block_size) + n * block_bytes + kExtentMacBytes;
  };
  const uint64_t full = extent_bytes(extent_blocks);
  uint64_t blocks = disk_bytes / full * extent_blocks;
  const uint64_t rest = disk_bytes % full;
  uint32_t k = 0;
  while (k + 1 < extent_blocks && extent_bytes(k + 1) <= rest) ++k;
  return blocks + k;
}

std::vector<TierCapacityRow> plan_tier_capacity(const PlannerModel& model, uint32_t tp,
                                                uint32_t block_size, uint64_t host_bytes,
                                                uint64_t disk_bytes, uint32_t extent_blocks) {
  std::vector<TierCapacityRow> rows;
  for (const KvDtype dtype : all_kv_dtypes()) {
    // f32 is left out, and so are the keys-only (per-channel) formats (tier_capacity.h).
    if (dtype == KvDtype::kF32 || kv_dtype_per_channel(dtype)) continue;
    TierCapacityRow r{.dtype = dtype};
    r.bytes_per_token = kv_shape_bytes(model.kv_shape(dtype, dtype, tp)).bytes_per_token;
    r.block_bytes = r.bytes_per_token * block_size;
    if (r.block_bytes == 0) continue;
    r.host_blocks = host_tier_blocks(host_bytes, r.block_bytes);
    r.host_tokens = r.host_blocks * block_size;
    r.disk_blocks = disk_tier_blocks(disk_bytes, r.block_bytes, block_size, extent_blocks);
    r.disk_tokens = r.disk_blocks * block_size;
    rows.push_back(r);
  }
  return rows;
}

}  // namespace kvs
