// RecentWindowSlots: which recent-token window slot (quant/recent_window.h) each sequence of the
// cache manager holds. Pure accounting, like the block pool: a sequence takes a slot when it is
// admitted (fresh, or restored), gives it back when it is freed (finished or preempted), and a
// forked child takes its own. Every hand-over is recorded for the model runner, which applies
// them in order before the next forward pass (take_changes): a slot taken by a new sequence is
// reset (none of its rows are the new owner's), a fork's slot is filled with its parent's rows.
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

// Slot `slot` changed hands: reset it (copy_from < 0), or fill it with slot copy_from's rows.
struct RecentSlotChange {
  uint32_t slot = 0;
  int32_t copy_from = -1;
  friend bool operator==(const RecentSlotChange&, const RecentSlotChange&) = default;
};

class RecentWindowSlots {
 public:
  explicit RecentWindowSlots(uint32_t slots);

  [[nodiscard]] uint32_t num_slots() const { return num_slots_; }
  [[nodiscard]] uint32_t num_free() const { return static_cast<uint32_t>(free_.size()); }
  // The sequence's slot, or -1 (no window, or not held).
  [[nodiscard]] int32_t slot_of(SeqId seq) const;

  // A slot for a new sequence (recorded as a reset); nullopt when none is free (the caller
  // fails its admission).
  std::optional<uint32_t> take(SeqId seq);
  // The child takes a slot, recorded as a copy of the parent's rows; false when none is free.
  bool fork(SeqId parent, SeqId child);
  // Gives the sequence's slot back (no-op if it holds none). Its rows stay until the next owner's
  // reset, so a copy out of it recorded before still reads them.
  void release(SeqId seq);
  // The changes recorded since the last call, in order.
  [[nodiscard]] std::vector<RecentSlotChange> take_changes();

  // Every held slot is held once and is not free; held + free == all.
  [[nodiscard]] bool check_integrity() const;

 private:
  uint32_t num_slots_;
  std::vector<uint32_t> free_;  // taken from the back
  std::unordered_map<uint64_t, uint32_t> held_;
  std::vector<RecentSlotChange> changes_;
};

}  // namespace kvs
