#include "tiers/kv_transfer_executor.h"

#include "core/check.h"

namespace kvs {

void KvTransferExecutor::run(const KvTransferPlan& plan) {
  for (const KvTransfer& t : plan.transfers) {
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
      default:
        KVS_CHECK_MSG(tiers_ != nullptr, "a tier transfer without tiers");
        switch (t.kind) {
          case KvTransferKind::kTierStore: tiers_->store(device_, t.src, t.dst); break;
          case KvTransferKind::kTierLoad: tiers_->load(device_, t.src, t.dst); break;
          case KvTransferKind::kTierDemote:
            tiers_->demote_slot(t.src, plan.tier_records.at(t.dst));
            break;
          case KvTransferKind::kDiskStore:
            tiers_->demote_block(device_, t.src, plan.tier_records.at(t.dst));
            break;
          case KvTransferKind::kRemoteStore:
            tiers_->store_remote(device_, t.src, plan.tier_records.at(t.dst));
            break;
          case KvTransferKind::kReadLoad:
            tiers_->load_verified(device_, plan.tier_reads.at(t.src), t.dst);
            break;
          default: KVS_CHECK_MSG(false, "unknown transfer kind");
        }
    }
  }
}

bool KvTransferExecutor::persist_tiers(const KvCacheManager& cache, double timeout_seconds) {
  return tiers_ == nullptr || tiers_->persist(device_, cache, timeout_seconds);
}

}  // namespace kvs
