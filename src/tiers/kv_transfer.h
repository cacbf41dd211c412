// KvTransfer: one movement of KV block bytes that a step needs before its forward pass. The
// scheduler and the tier policy decide them (they move no bytes); the transfer executor performs
// them in the order they were queued, and only then does the forward pass write the step's new KV.
// In-order execution is what makes recycling safe: a block (device or host) freed and reused
// within the same step is read by the transfers queued before its reuse and written by those
// queued after. Every tier decision (which host slot, what leaves a tier) is made at schedule
// time in that same order; the one exception is a load found before later decisions of the
// same step, so a host-tier slot a load will read is pinned until the step's transfers ran
// (host_tier.h).
//
//   kCopyTokens  device block src -> device block dst, token slots [0, num_tokens)
//                (copy-on-write of a shared partial block, partial prefix reuse)
//   kSwapOut     device block src -> host block dst (a preempted sequence's KV, whole block)
//   kSwapIn      host block src -> device block dst (its KV restored on re-admission)
//   kTierStore   device block src -> host-tier slot dst (a cached block leaving L1)
//   kTierLoad    host-tier slot src -> device block dst (a prefix hit in L2)
//   kTierDemote  host-tier slot src -> disk tier, described by tier_records[dst]
//   kDiskStore   device block src -> disk tier, described by tier_records[dst]
//   kRemoteStore device block src -> remote tier (Redis), described by tier_records[dst]
//   kReadLoad    tier_reads[src] (a handle on a block that the disk or Redis tier's loader
//                thread read and verified; verified_block.h) -> device block dst
#pragma once

#include <cstdint>
#include <vector>

#include "kvcache/tier_key.h"
#include "tiers/verified_block.h"

namespace kvs {

enum class KvTransferKind : uint8_t {
  kCopyTokens,
  kSwapOut,
  kSwapIn,
  kTierStore,
  kTierLoad,
  kTierDemote,
  kDiskStore,
  kRemoteStore,
  kReadLoad,
};

struct KvTransfer {
  KvTransferKind kind = KvTransferKind::kCopyTokens;
  uint32_t src = 0;
  uint32_t dst = 0;
  uint32_t num_tokens = 0;  // kCopyTokens only
  friend bool operator==(const KvTransfer&, const KvTransfer&) = default;
};

// What a block written to disk is (its bytes come from the transfer's source).
struct TierRecord {
  TierBlockMeta meta;
  std::vector<int32_t> tokens;
};

// A step's transfers and what they refer to.
struct KvTransferPlan {
  std::vector<KvTransfer> transfers;
  std::vector<TierRecord> tier_records;
  std::vector<VerifiedBlock> tier_reads;
};

}  // namespace kvs
