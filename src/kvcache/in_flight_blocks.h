// InFlightBlocks: the prompt blocks being computed right now, so that a second identical prompt
// waits for them instead of computing the same KV again (AdmitPlan::prefix_in_flight).
//
// When a sequence is admitted, every full prompt block the cache did not have is registered under
// its chain key (block_hash.h), in chain order. The first sequence to register a key owns it; a
// later one computing the same block does not take over. A key leaves the registry when its owner
// commits that block (blocks are committed in chain order, so only the owner's next pending key
// can match) or when the owner is dropped (finished, aborted, preempted). A forked child registers
// nothing: its parent keeps computing the shared prompt.
//
// Accounting only (no blocks, no bytes); the manager owns one. Thread safety: none.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "kvcache/sequence_block_tables.h"

namespace kvs {

class InFlightBlocks {
 public:
  // Registers seq's uncommitted prompt blocks, keys in chain order; a key someone already owns is
  // skipped. Precondition: seq has no pending keys.
  void register_chain(SeqId seq, std::span<const uint64_t> keys);
  // seq has committed the block with this chain key: if it is seq's next pending key, the block
  // is no longer in flight.
  void on_committed(SeqId seq, uint64_t key);
  // seq is gone: its pending keys are released. Unknown seq: no-op.
  void drop(SeqId seq);

  [[nodiscard]] bool empty() const { return owner_.empty(); }
  [[nodiscard]] bool contains(uint64_t key) const { return owner_.contains(key); }
  [[nodiscard]] size_t size() const { return owner_.size(); }
  // Keys seq still owns (registered, not committed), in chain order.
  [[nodiscard]] std::span<const uint64_t> pending(SeqId seq) const;

  // Every registered key is pending for exactly its owner, every owner is one of `live`, and no
  // owner lists a key twice. An error names the broken invariant.
  [[nodiscard]] Status check_integrity(std::span<const SeqId> live) const;

 private:
  struct Pending {
    std::vector<uint64_t> keys;
    size_t done = 0;  // keys[0, done) are committed
  };
  std::unordered_map<uint64_t, SeqId> owner_;
  std::unordered_map<SeqId, Pending> pending_;
};

}  // namespace kvs
