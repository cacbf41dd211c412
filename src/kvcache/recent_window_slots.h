// RecentWindowSlots: which recent-token window slot (quant/recent_window.h) each sequence of the
// cache manager holds. Pure accounting, like the block pool: a sequence takes a slot when it is
// admitted (fresh, or restored), gives it back when it is freed (finished or preempted), and a
// forked child takes its own, to be filled with a copy of its parent's (take_copies: the model
// runner copies the rows before the next forward pass reads them).
//
// The pool plan sizes the slots to max_num_seqs and the scheduler never runs more sequences
// than that (a request's samples included), so a running sequence always has one.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "kvcache/sequence_block_tables.h"

namespace kvs {

struct RecentSlotCopy {
  uint32_t src = 0;
  uint32_t dst = 0;
  friend bool operator==(const RecentSlotCopy&, const RecentSlotCopy&) = default;
};

class RecentWindowSlots {
 public:
  explicit RecentWindowSlots(uint32_t slots);

  [[nodiscard]] uint32_t num_slots() const { return num_slots_; }
  [[nodiscard]] uint32_t num_free() const { return static_cast<uint32_t>(free_.size()); }
  // The sequence's slot, or -1 (no window, or not held).
  [[nodiscard]] int32_t slot_of(SeqId seq) const;

  // A slot for a new sequence; nullopt when none is free (the caller fails its admission).
  std::optional<uint32_t> take(SeqId seq);
  // The child takes a slot and records a copy of the parent's rows; false when none is free.
  bool fork(SeqId parent, SeqId child);
  // Gives the sequence's slot back (no-op if it holds none); drops a pending copy into it.
  void release(SeqId seq);
  // The copies recorded since the last call, in order.
  [[nodiscard]] std::vector<RecentSlotCopy> take_copies();

  // Every held slot is held once and is not free; held + free == all.
  [[nodiscard]] bool check_integrity() const;

 private:
  uint32_t num_slots_;
  std::vector<uint32_t> free_;  // taken from the back
  std::unordered_map<uint64_t, uint32_t> held_;
  std::vector<RecentSlotCopy> copies_;
};

}  // namespace kvs
