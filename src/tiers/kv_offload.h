// KvOffload: the tiers under the device pool, built from the flags and reported on.
//
// It builds the TierStack (tier_stack.h: host RAM L2, disk L3, Redis L4) and its two faces: the
// TierPolicy the scheduler asks at schedule time (which tier holds what, what to store, demote,
// load or recompute; no byte access) and the TierStores the transfer executor calls to move the
// bytes. The server reads its statistics, block lists and KV events here.
// Thread safety: none (the engine's step loop owns it); stats() copies.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "core/server_secret.h"
#include "core/status.h"
#include "kvcache/kv_block_storage.h"
#include "tiers/host_block_pool.h"
#include "tiers/kv_offload_config.h"
#include "tiers/tier_policy.h"
#include "tiers/tier_stack.h"
#include "tiers/tier_stores.h"

namespace kvs {

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

  [[nodiscard]] const KvOffloadConfig& config() const { return stack_.config; }
  [[nodiscard]] TierPolicy& policy() { return policy_; }
  [[nodiscard]] TierStores& stores() { return *stores_; }

  // ---- KV events (config.log_events) ----
  // Every block the host tier (L2) takes or drops, in order, as prefix-cache events (never a
  // chain start: parent_key is always set).
  [[nodiscard]] std::vector<CacheEvent> take_host_events() {
    return std::exchange(stack_.host_events, {});
  }
  // The same for the disk tier's index (L3); its writer thread adds blocks between steps.
  [[nodiscard]] std::vector<CacheEvent> take_disk_events() {
    return stack_.disk ? stack_.disk->take_events() : std::vector<CacheEvent>{};
  }

  [[nodiscard]] KvOffloadStats stats() const;
  // The blocks each tier holds, by tier key (what KV events name them by; /v1/kv lists them).
  // Not part of stats(): /metrics and the dashboard read that often and need no list.
  [[nodiscard]] std::vector<uint64_t> host_block_hashes() const;  // most recent first
  [[nodiscard]] std::vector<uint64_t> disk_block_hashes() const;
  [[nodiscard]] Status check_integrity() const;

 private:
  KvOffload() : policy_(stack_) {}

  TierStack stack_;
  TierPolicy policy_;
  std::unique_ptr<TierStores> stores_;
};

}  // namespace kvs
