#include "tiers/host_tier.h"

#include <algorithm>
#include <string>

#include "core/check.h"

namespace kvs {

HostTier::HostTier(HostBlockPool& area, uint32_t block_size, uint32_t capacity_entries,
                   uint32_t slots_per_block)
    : area_(area),
      block_size_(block_size),
      per_block_(std::max<uint32_t>(1, slots_per_block)),
      capacity_(static_cast<uint32_t>(
          std::min<uint64_t>(capacity_entries, uint64_t{area.num_blocks()} * per_block_))),
      block_used_(area.num_blocks(), 0),
      free_pos_(size_t{area.num_blocks()} * per_block_, kNil),
      meta_(size_t{area.num_blocks()} * per_block_),
      tokens_(size_t{area.num_blocks()} * per_block_ * block_size, 0),
      present_(size_t{area.num_blocks()} * per_block_, 0),
      pinned_(size_t{area.num_blocks()} * per_block_, 0),
      links_(size_t{area.num_blocks()} * per_block_) {}

void HostTier::push_free(uint32_t s) {
  free_pos_[s] = static_cast<uint32_t>(free_slots_.size());
  free_slots_.push_back(s);
}

void HostTier::remove_free(uint32_t s) {
  const uint32_t i = free_pos_[s];
  const uint32_t last = free_slots_.back();
  free_slots_[i] = last;
  free_pos_[last] = i;
  free_slots_.pop_back();
  free_pos_[s] = kNil;
}

std::optional<uint32_t> HostTier::find(const TierBlockMeta& want,
                                       std::span<const int32_t> tokens) const {
  const auto it = index_.find(want.key);
  if (it == index_.end()) return std::nullopt;
  const uint32_t s = it->second;
  const TierBlockMeta& m = meta_[s];
  if (m.parent_key != want.parent_key || m.salt_check != want.salt_check) return std::nullopt;
  if (!std::equal(tokens.begin(), tokens.end(), this->tokens(s).begin())) return std::nullopt;
  return s;
}

void HostTier::link_back(uint32_t s) {
  links_[s] = {tail_, kNil};
  if (tail_ != kNil) links_[tail_].next = s;
  tail_ = s;
  if (head_ == kNil) head_ = s;
}

void HostTier::unlink(uint32_t s) {
  const Links l = links_[s];
  (l.prev != kNil ? links_[l.prev].next : head_) = l.next;
  (l.next != kNil ? links_[l.next].prev : tail_) = l.prev;
  links_[s] = {};
}

void HostTier::touch(uint32_t s) {
  KVS_CHECK(present_[s] != 0);
  ++meta_[s].hits;
  unlink(s);
  link_back(s);
}

std::optional<uint32_t> HostTier::insert(const TierBlockMeta& meta,
                                         std::span<const int32_t> tokens) {
  KVS_CHECK(!index_.contains(meta.key) && tokens.size() == block_size_);
  if (size() >= capacity_) return std::nullopt;
  if (free_slots_.empty()) {
    auto got = area_.allocate(1);
    if (!got) return std::nullopt;
    const uint32_t b = (*got)[0];
    ++blocks_held_;
    for (uint32_t i = per_block_; i-- > 0;) push_free(b * per_block_ + i);
  }
  const uint32_t s = free_slots_.back();
  remove_free(s);
  ++block_used_[s / per_block_];
  meta_[s] = meta;
  std::copy(tokens.begin(), tokens.end(), tokens_.begin() + size_t{s} * block_size_);
  present_[s] = 1;
  link_back(s);
  index_.emplace(meta.key, s);
  return s;
}

void HostTier::drop(uint32_t s) {
  unlink(s);
  index_.erase(meta_[s].key);
  present_[s] = 0;
  push_free(s);
  const uint32_t b = s / per_block_;
  if (--block_used_[b] == 0) {  // the host block's last entry: give it back
    for (uint32_t i = 0; i < per_block_; ++i) remove_free(b * per_block_ + i);
    --blocks_held_;
    const uint32_t one[1] = {b};
    area_.free(one);
  }
}

std::optional<HostTier::Evicted> HostTier::evict_lru() {
  uint32_t s = head_;
  while (s != kNil && pinned_[s] != 0) s = links_[s].next;
  if (s == kNil) return std::nullopt;
  Evicted e{.slot = s, .meta = meta_[s], .tokens = {}};
  const std::span<const int32_t> t = tokens(s);
  e.tokens.assign(t.begin(), t.end());
  drop(s);
  return e;
}

void HostTier::erase(uint32_t s) {
  KVS_CHECK(present_[s] != 0 && pinned_[s] == 0);
  drop(s);
}

void HostTier::pin(uint32_t s) {
  KVS_CHECK(present_[s] != 0);
  if (pinned_[s] != 0) return;
  pinned_[s] = 1;
  pinned_list_.push_back(s);
}

void HostTier::unpin_all() {
  for (uint32_t s : pinned_list_) pinned_[s] = 0;
  pinned_list_.clear();
}

Status HostTier::check_integrity() const {
  uint32_t listed = 0;
  uint32_t prev = kNil;
  for (uint32_t s = head_; s != kNil; s = links_[s].next) {
    if (present_[s] == 0) return internal_error("host tier: LRU lists an absent slot");
    if (links_[s].prev != prev) return internal_error("host tier: broken LRU links");
    const auto it = index_.find(meta_[s].key);
    if (it == index_.end() || it->second != s)
      return internal_error("host tier: slot " + std::to_string(s) + " is not indexed");
    prev = s;
    if (++listed > present_.size()) return internal_error("host tier: LRU cycle");
  }
  if (prev != tail_) return internal_error("host tier: LRU tail mismatch");
  if (listed != index_.size()) return internal_error("host tier: index and LRU sizes differ");
  if (listed > capacity_) return internal_error("host tier: over capacity");
  // Per host block: entries + free slots = slots_per_block for the blocks the tier holds.
  std::vector<uint32_t> used(block_used_.size(), 0), free(block_used_.size(), 0);
  for (uint32_t s = 0; s < present_.size(); ++s) used[s / per_block_] += present_[s];
  for (size_t i = 0; i < free_slots_.size(); ++i) {
    const uint32_t s = free_slots_[i];
    if (free_pos_[s] != i || present_[s] != 0)
      return internal_error("host tier: broken free slot list");
    ++free[s / per_block_];
  }
  uint32_t held = 0;
  for (size_t b = 0; b < used.size(); ++b) {
    if (used[b] != block_used_[b]) return internal_error("host tier: block use count is wrong");
    if (used[b] == 0 && free[b] == 0) continue;
    if (used[b] == 0 || used[b] + free[b] != per_block_)
      return internal_error("host tier: host block " + std::to_string(b) +
                            " is held but its slots do not add up");
    ++held;
  }
  if (held != blocks_held_) return internal_error("host tier: held host block count is wrong");
  size_t pinned = 0;
  for (uint32_t s = 0; s < pinned_.size(); ++s) {
    if (pinned_[s] == 0) continue;
    ++pinned;
    if (present_[s] == 0) return internal_error("host tier: a pinned slot holds no entry");
  }
  if (pinned != pinned_list_.size()) return internal_error("host tier: pin list is wrong");
  if (area_.num_used() < held) return internal_error("host tier: holds untaken host blocks");
  return Status::ok();
}

}  // namespace kvs
