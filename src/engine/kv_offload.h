// KvOffload: the tiers under the device pool (L1) and the decisions about them.
//
//   L2  host RAM: HostTier accounting over the one host area (swap's too) and its bytes;
//   L3  disk: DiskTier (extents, checksums, warm restart);
//   L4  remote: RemoteTier (Redis, shared by replicas). Always written through: a block goes
//       to Redis as soon as it is complete, so that a peer can use it at once.
//
// Write-back (default): a cached block that L1 evicts goes to L2; L2's LRU evictions go to L3
// if the block served at least `disk_admit_hits` prefix hits. Without L2 they go straight to L3.
// Write-through: every block is copied down (L2 and L3) as soon as it becomes cached.
//
// Every decision is made at schedule time and recorded as transfers (kv_transfer.h), whose
// in-order execution moves the bytes. Disk and remote hits are read and verified by their tier's
// loader thread before the schedule uses them (the request waits, "loading"); at schedule time
// their verified bytes are copied into the step's plan (private to it), so a bad extent is
// dropped before anything uses it and the block is recomputed. The engine thread never waits on
// a disk or a network. Load or recompute: each run of tier hits is loaded only when the
// measured load bandwidth of its tier moves its bytes faster than the measured prefill rate
// recomputes its tokens; otherwise it is recomputed, and the decision is counted.
// Thread safety: none (the engine's step loop owns it); stats() copies.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "engine/kv_block_transcoder.h"
#include "kvcache/disk_tier.h"
#include "kvcache/host_block_pool.h"
#include "kvcache/host_tier.h"
#include "kvcache/kv_block_storage.h"
#include "kvcache/kv_cache_manager.h"
#include "kvcache/kv_transfer.h"
#include "kvcache/remote_tier.h"

namespace kvs {

enum class OffloadPolicy : uint8_t { kWriteBack, kWriteThrough };
[[nodiscard]] const char* offload_policy_name(OffloadPolicy p);
[[nodiscard]] Result<OffloadPolicy> parse_offload_policy(const std::string& name);

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

class KvOffload {
 public:
  // `area` is the one host area (swap shares it); host_tier_blocks of it may hold L2 entries,
  // whose bytes live in `host_storage` (laid out like the device pool, whose shape is `pool`);
  // demoted entries are packed several to a host block.
  // `secrets` key what leaves the process (extents, Redis values) and name its namespace.
  static Result<std::unique_ptr<KvOffload>> create(const KvOffloadConfig& config,
                                                   const KvStorageShape& pool,
                                                   uint64_t model_fingerprint,
                                                   const TierSecrets& secrets, HostBlockPool& area,
                                                   KvBlockStorage* host_storage,
                                                   uint32_t host_tier_blocks);

  [[nodiscard]] const KvOffloadConfig& config() const { return config_; }
  [[nodiscard]] bool write_through() const {
    return config_.policy == OffloadPolicy::kWriteThrough;
  }

  // ---- schedule time ----
  // A cached block leaves L1 (eviction, write-back) or became cached (write-through): queue
  // what copies it down. Its bytes are read by the queued transfers, in order.
  void plan_store(BlockId block, const TierBlockMeta& meta, std::span<const int32_t> tokens,
                  KvTransferPlan& plan);
  // Frees host-area blocks for swap (evicting L2 entries, demoted as usual) until `n` are free
  // or L2 is empty. Returns whether n are free.
  bool make_host_room(uint32_t n, KvTransferPlan& plan);
  // Whether the blocks that become cached must be reported (plan_completed): write-through, or
  // a remote tier.
  [[nodiscard]] bool wants_completed_blocks() const {
    return write_through() || remote_ != nullptr;
  }
  // A block became cached in L1: write-through copies it down; the remote tier gets it now.
  void plan_completed(BlockId block, const TierBlockMeta& meta, std::span<const int32_t> tokens,
                      KvTransferPlan& plan);
  enum class Source : uint8_t { kHost, kDisk, kRemote };
  // How a run of blocks is found: where its bytes come from.
  struct Hit {
    Source source = Source::kHost;
    uint32_t src = 0;  // host slot, or index into plan.tier_reads (disk, remote)
    TierBlockMeta meta;
  };
  struct Found {
    std::vector<Hit> hits;
    // The run continues on disk in extents not read yet: their reads are queued on the disk
    // tier's loader thread and `hits` is empty; ask again in a later step.
    bool loading = false;
  };
  // Walks `chain` (the tier identities of the prompt blocks after the cached ones; tokens[i *
  // block_size, +block_size) are block i's ids) down L2, L3 then L4 and returns the longest run
  // of hits worth loading; disk and remote hits must have been read and verified by their
  // tier's reader thread (asynchronous): those not yet read are queued and the answer is
  // `loading`, unless `give_up` (the request waited long enough), which takes only what is
  // ready and leaves the rest to be recomputed. Their bytes go to plan.tier_reads. Counts the
  // load-or-recompute decisions (prefill_tokens_per_s: the engine's measured rate, 0 = unknown).
  // The host slots it returns are pinned until end_step().
  Found find(std::span<const TierBlockMeta> chain, std::span<const int32_t> tokens,
             double prefill_tokens_per_s, bool give_up, KvTransferPlan& plan);
  // Blocks until a queued disk or remote read finishes or timeout_seconds pass (an engine with
  // nothing else to run waits here instead of spinning); false when no read is queued.
  bool wait_for_tier_reads(double timeout_seconds);
  // Queues the loads of the first blocks.size() hits (those the cache manager imported) into
  // `blocks`, and counts their tokens as hits of their tier.
  void plan_loads(std::span<const Hit> hits, std::span<const BlockId> blocks, KvTransferPlan& plan);
  // After the step's transfers ran: unpins the host slots find() pinned, and closes the disk
  // tier's open extent if nothing was added to it during the step.
  void end_step();

  // ---- transfer time (KvTransferExecutor) ----
  void store(const KvBlockStorage& device, uint32_t block, uint32_t slot);
  void load(KvBlockStorage& device, uint32_t slot, uint32_t block);
  // To disk: from a host-tier slot (already in the tier format), or from a device block.
  void demote_slot(uint32_t slot, const TierRecord& record);
  void demote_block(const KvBlockStorage& device, uint32_t block, const TierRecord& record);
  // Bytes read (and verified) at schedule time from disk or Redis, into a device block.
  void load_read(KvBlockStorage& device, const std::vector<uint8_t>& bytes, uint32_t block);
  // To Redis: a device block that became cached.
  void store_remote(const KvBlockStorage& device, uint32_t block, const TierRecord& record);

  // ---- shutdown ----
  // Writes every L2 entry, and every block L1 still caches, that the disk tier would admit,
  // then waits (at most timeout_seconds) for the disk writes. No-op without a disk tier.
  bool persist(const KvBlockStorage& device, const KvCacheManager& cache, double timeout_seconds);

  // ---- KV events (config.log_events) ----
  // Every block the host tier (L2) takes or drops, in order, as prefix-cache events (never a
  // chain start: parent_key is always set).
  [[nodiscard]] std::vector<PrefixCache::Event> take_host_events() {
    return std::exchange(host_events_, {});
  }
  // The same for the disk tier's index (L3); its writer thread adds blocks between steps.
  [[nodiscard]] std::vector<PrefixCache::Event> take_disk_events() {
    return disk_ ? disk_->take_events() : std::vector<PrefixCache::Event>{};
  }

  [[nodiscard]] KvOffloadStats stats() const;
  // The blocks each tier holds, by tier key (what KV events name them by; /v1/kv lists them).
  // Not part of stats(): /metrics and the dashboard read that often and need no list.
  [[nodiscard]] std::vector<uint64_t> host_block_hashes() const;  // most recent first
  [[nodiscard]] std::vector<uint64_t> disk_block_hashes() const;
  [[nodiscard]] Status check_integrity() const;

 private:
  KvOffload(const KvOffloadConfig& config, HostBlockPool& area, KvBlockStorage* host_storage,
            uint32_t block_size, uint64_t pool_block_bytes);
  [[nodiscard]] uint8_t* slot_data(uint32_t slot) const;
  // The tier-format bytes of a device block (its own bytes, or re-encoded into scratch_).
  const uint8_t* tier_bytes_of(const KvBlockStorage& device, uint32_t block);
  void measure_startup_bandwidth();
  void plan_demote(const HostTier::Evicted& e, KvTransferPlan& plan);
  [[nodiscard]] bool admits_to_disk(const TierBlockMeta& meta) const {
    return disk_ != nullptr && meta.hits >= config_.disk_admit_hits;
  }
  static void record_load(TierStats& t, double seconds, uint64_t bytes);
  // Whether loading n blocks from a tier at its measured bandwidth beats recomputing their
  // tokens at the measured prefill rate (unknown rates: load).
  [[nodiscard]] bool worth_loading(const TierStats& t, size_t n, double prefill_tokens_per_s) const;
  // The remote part of find(): the run of chain blocks Redis holds, fetched and verified, from
  // chain[0] (which no other tier holds). Appends them to hits (their bytes to plan.tier_reads).
  enum class RemoteFound : uint8_t { kNone, kHits, kLoading };
  static constexpr size_t kMaxRemoteFetchBlocks = 256;
  // give_up: the request has waited long enough; use the blocks already fetched, ask no more.
  RemoteFound find_remote(std::span<const TierBlockMeta> chain, std::span<const int32_t> tokens,
                          double prefill_tokens_per_s, bool give_up, KvTransferPlan& plan,
                          std::vector<Hit>& hits);

  KvOffloadConfig config_;
  HostBlockPool& area_;
  KvBlockStorage* host_storage_;
  std::unique_ptr<HostTier> host_;      // null without L2
  std::unique_ptr<DiskTier> disk_;      // null without L3
  std::unique_ptr<RemoteTier> remote_;  // null without L4
  uint32_t block_size_;
  uint64_t pool_block_bytes_;
  uint64_t block_bytes_;  // of a tier entry (the pool's, or the demoted format's)
  std::optional<KvBlockTranscoder> transcoder_;  // set when demoting
  uint32_t host_area_blocks_ = 0;
  std::vector<uint8_t> scratch_;
  TierStats host_stats_, disk_stats_, remote_stats_;
  uint64_t disk_added_this_step_ = 0;
  bool log_events_ = false;
  std::vector<PrefixCache::Event> host_events_;
};

}  // namespace kvs
