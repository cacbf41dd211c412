// KvTransferExecutor: performs a step's KvTransfers (kv_transfer.h) on the KV bytes, in the order
// the scheduler and the tier policy queued them: copy-on-write and partial-prefix copies inside
// the device pool, swap-outs to and swap-ins from the host area, and the tier moves through the
// tier stores (stores to and loads from the host tier, writes to disk and Redis, loads of
// verified disk and Redis reads). The one place that moves block bytes between steps; the
// forward pass then writes the step's new KV.
#pragma once

#include "kvcache/kv_block_storage.h"
#include "kvcache/kv_cache_manager.h"
#include "tiers/kv_transfer.h"
#include "tiers/tier_stores.h"

namespace kvs {

class KvTransferExecutor {
 public:
  // `host` holds the host area's blocks (swap and the host tier), laid out like `device` (may be
  // null when neither is on); `tiers` performs the tier moves (null when tiers are off).
  KvTransferExecutor(KvBlockStorage& device, KvBlockStorage* host, TierStores* tiers)
      : device_(device), host_(host), tiers_(tiers) {}

  void run(const KvTransferPlan& plan);

  // Shutdown: what the disk tier would keep (L2 entries, blocks `cache` still holds) is written
  // down, within timeout_seconds (TierStores::persist). True without tiers.
  bool persist_tiers(const KvCacheManager& cache, double timeout_seconds);

 private:
  KvBlockStorage& device_;
  KvBlockStorage* host_;
  TierStores* tiers_;
};

}  // namespace kvs
