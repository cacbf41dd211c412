// KvTransferExecutor: performs a step's KvTransfers (kvcache/kv_transfer.h) on the KV bytes, in
// the order the scheduler queued them: copy-on-write and partial-prefix copies inside the device
// pool, swap-outs to and swap-ins from the host area, and the tier moves (stores to and loads
// from the host tier, writes to and loads from the disk tier). The one place that moves block
// bytes between steps; the forward pass then writes the step's new KV.
#pragma once

#include "engine/kv_offload.h"
#include "kvcache/kv_block_storage.h"
#include "kvcache/kv_transfer.h"

namespace kvs {

class KvTransferExecutor {
 public:
  // `host` holds the host area's blocks (swap and the host tier), laid out like `device` (may be
  // null when neither is on); `offload` performs the tier moves (null when tiers are off).
  KvTransferExecutor(KvBlockStorage& device, KvBlockStorage* host, KvOffload* offload)
      : device_(device), host_(host), offload_(offload) {}

  void run(const KvTransferPlan& plan);

 private:
  KvBlockStorage& device_;
  KvBlockStorage* host_;
  KvOffload* offload_;
};

}  // namespace kvs
