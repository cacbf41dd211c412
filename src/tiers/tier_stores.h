// TierStores: the tiers' bytes. The transfer executor calls these as it runs a step's transfers
// (the one place block bytes move): host-tier slots are written and read in the tier format
// (re-encoded when --kv-offload-dtype demotes), blocks are handed to the disk tier's writer and
// the remote tier's queue, and verified disk and Redis reads are decoded into device blocks.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "kvcache/kv_block_storage.h"
#include "kvcache/kv_cache_manager.h"
#include "tiers/kv_block_transcoder.h"
#include "tiers/kv_transfer.h"
#include "tiers/tier_stack.h"
#include "tiers/verified_block.h"

namespace kvs {

class TierStores {
 public:
  // `transcoder`: set when the tiers hold another format than the pool's.
  TierStores(TierStack& stack, std::optional<KvBlockTranscoder> transcoder);

  // Device block -> host-tier slot (kTierStore), and back (kTierLoad).
  void store(const KvBlockStorage& device, uint32_t block, uint32_t slot);
  void load(KvBlockStorage& device, uint32_t slot, uint32_t block);
  // To disk: from a host-tier slot (already in the tier format), or from a device block.
  void demote_slot(uint32_t slot, const TierRecord& record);
  void demote_block(const KvBlockStorage& device, uint32_t block, const TierRecord& record);
  // To Redis: a device block that became cached.
  void store_remote(const KvBlockStorage& device, uint32_t block, const TierRecord& record);
  // A block a loader thread read and verified (disk or Redis), into a device block.
  void load_verified(KvBlockStorage& device, const VerifiedBlock& read, uint32_t block);

  // Shutdown: writes every L2 entry, and every block L1 still caches, that the disk tier would
  // admit, then waits (at most timeout_seconds) for the disk writes; the remote tier's queued
  // writes go first. No-op without a disk or remote tier.
  bool persist(const KvBlockStorage& device, const KvCacheManager& cache, double timeout_seconds);

  // The startup estimate of each tier's load bandwidth (host copies, a disk probe file, the
  // remote tier's first round trips), before any load was measured.
  void measure_startup_bandwidth();

 private:
  [[nodiscard]] uint8_t* slot_data(uint32_t slot) const;
  // The tier-format bytes of a device block (its own bytes, or re-encoded into scratch_).
  const uint8_t* tier_bytes_of(const KvBlockStorage& device, uint32_t block);

  TierStack& t_;
  std::optional<KvBlockTranscoder> transcoder_;
  std::vector<uint8_t> scratch_;
};

}  // namespace kvs
