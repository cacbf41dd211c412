// TierStack: the tiers under the device pool (L1), as the policy and the stores share them.
//
//   L2  host RAM: HostTier accounting over the one host area (swap's too); its bytes live in the
//       host storage, laid out like the device pool (demoted entries packed several to a block);
//   L3  disk: DiskTier (extents, MACs, warm restart; a loader thread reads and verifies);
//   L4  remote: RemoteTier (Redis, shared by replicas; a reader thread fetches and verifies).
//
// TierPolicy (tier_policy.h) decides at schedule time and touches no byte; TierStores
// (tier_stores.h) moves the bytes when the transfer executor runs the step's transfers; KvOffload
// (kv_offload.h) builds the stack and reports on it. Thread safety: none (the engine's step loop
// owns it); the disk and remote tiers lock for their own threads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "tiers/disk_tier.h"
#include "tiers/host_block_pool.h"
#include "tiers/host_tier.h"
#include "tiers/kv_offload_config.h"
#include "tiers/remote_tier.h"

namespace kvs {

class KvBlockStorage;

struct TierStack {
  KvOffloadConfig config;
  HostBlockPool* area = nullptr;           // the one host area (swap shares it)
  KvBlockStorage* host_storage = nullptr;  // the host area's bytes (with a host tier)
  std::unique_ptr<HostTier> host;          // null without L2
  std::unique_ptr<DiskTier> disk;          // null without L3
  std::unique_ptr<RemoteTier> remote;      // null without L4
  uint32_t block_size = 0;
  uint64_t pool_block_bytes = 0;
  uint64_t block_bytes = 0;  // of a tier entry (the pool's, or the demoted format's)
  bool demoted = false;      // the tiers hold config.tier_dtype, not the pool's format
  uint32_t host_area_blocks = 0;
  TierStats host_stats, disk_stats, remote_stats;
  uint64_t disk_added_this_step = 0;    // blocks the stores gave the disk tier during the step
  std::vector<CacheEvent> host_events;  // config.log_events: what L2 took or dropped

  [[nodiscard]] bool write_through() const { return config.policy == OffloadPolicy::kWriteThrough; }
  [[nodiscard]] bool admits_to_disk(const TierBlockMeta& meta) const {
    return disk != nullptr && meta.hits >= config.disk_admit_hits;
  }
  // One block loaded from a tier in `seconds`: the latency histogram and the online bandwidth.
  static void record_load(TierStats& t, double seconds, uint64_t bytes) {
    ++t.blocks_loaded;
    ++t.load_count;
    t.load_seconds_sum += seconds;
    size_t i = 0;
    while (i < kTierLoadBuckets.size() && seconds > kTierLoadBuckets[i]) ++i;
    ++t.load_buckets[i];
    if (seconds > 0) {
      const double bw = bytes / seconds;
      t.load_bytes_per_s = t.load_bytes_per_s > 0 ? 0.9 * t.load_bytes_per_s + 0.1 * bw : bw;
    }
  }
};

}  // namespace kvs
