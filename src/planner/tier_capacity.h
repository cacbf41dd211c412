// tier_capacity: how many prefix tokens the KV offload tiers hold, per KV format, computed with
// the engine's own numbers: a host-tier entry is one pool block (block_size x bytes per token,
// kv_geometry's formula), and the disk tier stores blocks in extents whose headers and checksums
// cost bytes too (kv_extent.h), so `kvserve plan --kv-offload-*` agrees with the engine to the
// block.
#pragma once

#include <cstdint>
#include <vector>

#include "kvcache/kv_geometry.h"
#include "planner/model_config.h"
#include "quant/kv_format.h"

namespace kvs {

struct TierCapacityRow {
  KvDtype dtype = KvDtype::kF16;  // K and V
  uint64_t bytes_per_token = 0;
  uint64_t block_bytes = 0;
  uint64_t host_blocks = 0, host_tokens = 0;
  uint64_t disk_blocks = 0, disk_tokens = 0;
};

// Blocks of block_bytes that `disk_bytes` of extents hold: full extents of extent_blocks blocks
// (header + payload + checksum each), then one shorter extent in what is left.
[[nodiscard]] uint64_t disk_tier_blocks(uint64_t disk_bytes, uint64_t block_bytes,
                                        uint32_t block_size, uint32_t extent_blocks);

// One row per KV format the engine stores for K and V alike (f32 and the keys-only per-channel
// formats excluded), K and V in that format.
[[nodiscard]] std::vector<TierCapacityRow> plan_tier_capacity(const PlannerModel& model,
                                                              uint32_t tp, uint32_t block_size,
                                                              uint64_t host_bytes,
                                                              uint64_t disk_bytes,
                                                              uint32_t extent_blocks = 16);

}  // namespace kvs
