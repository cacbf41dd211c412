// KvTransferExecutor: performs a step's KvTransfers (kvcache/kv_transfer.h) on the KV bytes, in
// the order the scheduler queued them: copy-on-write and partial-prefix copies inside the device
// pool, swap-outs to and swap-ins from the host area. The one place that moves block bytes
// between steps; the forward pass then writes the step's new KV.
#pragma once

#include <span>

#include "kvcache/kv_block_storage.h"
#include "kvcache/kv_transfer.h"

namespace kvs {

class KvTransferExecutor {
 public:
  // `host` holds the swap area's blocks, laid out like `device` (may have no blocks when swap
  // mode is off).
  KvTransferExecutor(KvBlockStorage& device, KvBlockStorage* host) : device_(device), host_(host) {}

  void run(std::span<const KvTransfer> transfers);

 private:
  KvBlockStorage& device_;
  KvBlockStorage* host_;
};

}  // namespace kvs
