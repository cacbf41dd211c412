// The tiers' configuration (the --kv-offload-* and --kv-remote-* flags) and their statistics.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "quant/kv_format.h"
#include "tiers/remote_tier.h"

namespace kvs {

enum class OffloadPolicy : uint8_t { kWriteBack, kWriteThrough };
[[nodiscard]] const char* offload_policy_name(OffloadPolicy p);
[[nodiscard]] Result<OffloadPolicy> parse_offload_policy(const std::string& name);

// Blocks of `block_bytes` the host tier holds in `host_bytes` (--kv-offload-memory): whole
// blocks, at most kMaxPoolBlocks (host block ids are 32-bit). The engine sizes its host tier with
// it and `kvserve plan --kv-offload-memory` reports it (planner/tier_capacity.h).
[[nodiscard]] uint64_t host_tier_blocks(uint64_t host_bytes, uint64_t block_bytes);

struct KvOffloadConfig {
  uint64_t host_bytes = 0;  // L2 (--kv-offload-memory); 0 = off
  std::string disk_dir;     // L3 (--kv-offload-dir); empty = off
  uint64_t disk_bytes = uint64_t{4} << 30;
  OffloadPolicy policy = OffloadPolicy::kWriteBack;
  uint32_t disk_admit_hits = 0;
  uint32_t extent_blocks = 16;
  // Element format of the tiers' blocks (--kv-offload-dtype): nullopt = the pool's ("same").
  // Blocks are re-encoded as they leave the pool and decoded back to its format on load.
  std::optional<KvDtype> tier_dtype;
  // L4 (--kv-remote redis://HOST:PORT[/DB], repeatable); empty = off.
  std::vector<std::string> remote_urls;
  uint32_t remote_ttl_seconds = 0;  // --kv-remote-ttl (0: no expiry)
  uint32_t remote_timeout_ms = 50;  // --kv-remote-timeout-ms
  // Record the host and disk tiers' changes for KV events (take_host_events, take_disk_events).
  bool log_events = false;
  [[nodiscard]] bool enabled() const {
    return host_bytes > 0 || !disk_dir.empty() || !remote_urls.empty();
  }
  // The values' ranges (no file or network is touched): a clear error naming the flag.
  [[nodiscard]] Status validate() const;
};

// Load latency buckets (seconds, upper bounds) of the per-tier histograms.
inline constexpr std::array<double, 10> kTierLoadBuckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025,
                                                            0.005,  0.01,    0.025,  0.1,   0.5};

struct TierStats {
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t blocks = 0;
  uint64_t blocks_stored = 0;
  uint64_t blocks_loaded = 0;
  uint64_t blocks_evicted = 0;
  uint64_t hit_tokens = 0;  // prompt tokens served from this tier
  uint64_t checksum_failures = 0;
  uint64_t errors = 0;
  uint64_t load_decisions = 0;       // runs of hits loaded
  uint64_t recompute_decisions = 0;  // runs of hits recomputed because loading was slower
  double load_bytes_per_s = 0;       // measured (startup, then online)
  // Load latency of a block: counts per kTierLoadBuckets bucket (+1 overflow), sum, count.
  std::array<uint64_t, kTierLoadBuckets.size() + 1> load_buckets{};
  double load_seconds_sum = 0;
  uint64_t load_count = 0;
};

struct KvOffloadStats {
  bool enabled = false;
  bool host_enabled = false, disk_enabled = false, remote_enabled = false;
  OffloadPolicy policy = OffloadPolicy::kWriteBack;
  uint32_t disk_admit_hits = 0;
  TierStats host, disk, remote;
  // Host blocks of the host area: the tier's share, and those it holds now.
  uint64_t host_area_blocks = 0, host_blocks_held = 0;
  std::optional<KvDtype> tier_dtype;  // demoted format (nullopt: the pool's)
  uint64_t disk_foreign_extents = 0;  // extents of another model/format/block size, ignored
  uint64_t disk_torn_files_removed = 0;
  uint64_t disk_skipped_entries = 0;  // links, FIFOs, devices, unreadable files: never read
  uint64_t disk_pending_blocks = 0;
  bool disk_admitting = true;
  uint64_t remote_dropped_writes = 0;  // queue full, breaker open or a failed SET
  uint64_t remote_queued_writes = 0;
  uint64_t remote_bytes_written = 0, remote_bytes_read = 0;
  std::vector<RemoteInstanceState> remote_instances;
};

}  // namespace kvs
