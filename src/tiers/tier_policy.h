// TierPolicy: the schedule-time decisions about the tiers, which touch no byte.
//
// Write-back (default): a cached block that L1 evicts goes to L2; L2's LRU evictions go to L3
// if the block served at least `disk_admit_hits` prefix hits. Without L2 they go straight to L3.
// Write-through: every block is copied down (L2 and L3) as soon as it becomes cached. The remote
// tier (L4) is always written through: a block goes to Redis as soon as it is complete, so that a
// peer can use it at once.
//
// Every decision is recorded as transfers (kv_transfer.h), whose in-order execution by the
// transfer executor moves the bytes (tier_stores.h). Disk and remote hits are read and verified
// by their tier's loader thread before the schedule uses them (the request waits, "loading");
// the plan then carries a handle on the verified bytes (verified_block.h), so a bad extent is
// dropped before anything uses it and the block is recomputed. The engine thread never waits on
// a disk or a network. Load or recompute: each run of tier hits is loaded only when the measured
// load bandwidth of its tier moves its bytes faster than the measured prefill rate recomputes its
// tokens; otherwise it is recomputed, and the decision is counted.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvcache/block_pool.h"
#include "tiers/kv_transfer.h"
#include "tiers/tier_stack.h"

namespace kvs {

class TierPolicy {
 public:
  explicit TierPolicy(TierStack& stack) : t_(stack) {}

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
    return t_.write_through() || t_.remote != nullptr;
  }
  // A block became cached in L1: write-through copies it down; the remote tier gets it now.
  void plan_completed(BlockId block, const TierBlockMeta& meta, std::span<const int32_t> tokens,
                      KvTransferPlan& plan);

  enum class Source : uint8_t { kHost, kDisk, kRemote };
  // How a block is found: where its bytes come from.
  struct Hit {
    Source source = Source::kHost;
    uint32_t src = 0;  // host slot, or index into plan.tier_reads (disk, remote)
    TierBlockMeta meta;
  };
  struct Found {
    std::vector<Hit> hits;
    // The run continues on disk or in Redis in blocks not read yet: their reads are queued on
    // the tier's loader thread and `hits` is empty; ask again in a later step.
    bool loading = false;
  };
  // Walks `chain` (the tier identities of the prompt blocks after the cached ones; tokens[i *
  // block_size, +block_size) are block i's ids) down L2, L3 then L4 and returns the longest run
  // of hits worth loading; disk and remote hits must have been read and verified by their
  // tier's loader thread: those not yet read are queued and the answer is `loading`, unless
  // `give_up` (the request waited long enough), which takes only what is ready and leaves the
  // rest to be recomputed. Handles on their verified bytes go to plan.tier_reads. Counts the
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

 private:
  void plan_demote(const HostTier::Evicted& e, KvTransferPlan& plan);
  // Whether loading n blocks from a tier at its measured bandwidth beats recomputing their
  // tokens at the measured prefill rate (unknown rates: load).
  [[nodiscard]] bool worth_loading(const TierStats& t, size_t n, double prefill_tokens_per_s) const;
  // The remote part of find(): the run of chain blocks Redis holds, fetched and verified, from
  // chain[0] (which no other tier holds). Appends them to hits (handles to plan.tier_reads).
  enum class RemoteFound : uint8_t { kNone, kHits, kLoading };
  static constexpr size_t kMaxRemoteFetchBlocks = 256;
  // give_up: the request has waited long enough; use the blocks already fetched, ask no more.
  RemoteFound find_remote(std::span<const TierBlockMeta> chain, std::span<const int32_t> tokens,
                          double prefill_tokens_per_s, bool give_up, KvTransferPlan& plan,
                          std::vector<Hit>& hits);

  TierStack& t_;
};

}  // namespace kvs
