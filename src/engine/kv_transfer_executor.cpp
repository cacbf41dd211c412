#include "engine/kv_transfer_executor.h"

#include "core/check.h"

namespace kvs {

void KvTransferExecutor::run(std::span<const KvTransfer> transfers) {
  for (const KvTransfer& t : transfers) {
    switch (t.kind) {
      case KvTransferKind::kCopyTokens: device_.copy_tokens(t.src, t.dst, t.num_tokens); break;
      case KvTransferKind::kSwapOut:
        KVS_CHECK_MSG(host_ != nullptr, "a swap-out without a host area");
        device_.copy_block_to(t.src, *host_, t.dst);
        break;
      case KvTransferKind::kSwapIn:
        KVS_CHECK_MSG(host_ != nullptr, "a swap-in without a host area");
        host_->copy_block_to(t.src, device_, t.dst);
        break;
    }
  }
}

}  // namespace kvs
