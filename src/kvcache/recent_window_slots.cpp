#include "kvcache/recent_window_slots.h"

namespace kvs {

RecentWindowSlots::RecentWindowSlots(uint32_t slots) : num_slots_(slots) {
  free_.reserve(slots);
  for (uint32_t s = slots; s-- > 0;) free_.push_back(s);  // slot 0 is taken first
}

int32_t RecentWindowSlots::slot_of(SeqId seq) const {
  const auto it = held_.find(seq.value);
  return it == held_.end() ? -1 : static_cast<int32_t>(it->second);
}

std::optional<uint32_t> RecentWindowSlots::take(SeqId seq) {
  if (held_.contains(seq.value)) return held_.at(seq.value);
  if (free_.empty()) return std::nullopt;
  const uint32_t s = free_.back();
  free_.pop_back();
  held_.emplace(seq.value, s);
  changes_.push_back({.slot = s});
  return s;
}

bool RecentWindowSlots::fork(SeqId parent, SeqId child) {
  const int32_t from = slot_of(parent);
  if (from < 0) return true;  // nothing to copy (no window)
  const std::optional<uint32_t> to = take(child);
  if (!to) return false;
  changes_.back().copy_from = from;  // take's reset becomes the copy
  return true;
}

void RecentWindowSlots::release(SeqId seq) {
  const auto it = held_.find(seq.value);
  if (it == held_.end()) return;
  free_.push_back(it->second);
  held_.erase(it);
}

std::vector<RecentSlotChange> RecentWindowSlots::take_changes() {
  std::vector<RecentSlotChange> out;
  out.swap(changes_);
  return out;
}

bool RecentWindowSlots::check_integrity() const {
  std::vector<uint8_t> seen(num_slots_, 0);
  for (uint32_t s : free_) {
    if (s >= num_slots_ || seen[s]++ != 0) return false;
  }
  for (const auto& [seq, s] : held_) {
    if (s >= num_slots_ || seen[s]++ != 0) return false;
  }
  return free_.size() + held_.size() == num_slots_;
}

}  // namespace kvs
