#include "kvcache/host_tier.h"

#include <algorithm>
#include <string>

#include "core/check.h"

namespace kvs {

HostTier::HostTier(HostBlockPool& area, uint32_t block_size, uint32_t capacity_blocks)
    : area_(area),
      block_size_(block_size),
      capacity_(std::min(capacity_blocks, area.num_blocks())),
      meta_(area.num_blocks()),
      tokens_(size_t{area.num_blocks()} * block_size, 0),
      present_(area.num_blocks(), 0),
      links_(area.num_blocks()) {}

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
  auto got = area_.allocate(1);
  if (!got) return std::nullopt;
  const uint32_t s = (*got)[0];
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
  const uint32_t one[1] = {s};
  area_.free(one);
}

std::optional<HostTier::Evicted> HostTier::evict_lru() {
  if (head_ == kNil) return std::nullopt;
  const uint32_t s = head_;
  Evicted e{.slot = s, .meta = meta_[s], .tokens = {}};
  const std::span<const int32_t> t = tokens(s);
  e.tokens.assign(t.begin(), t.end());
  drop(s);
  return e;
}

void HostTier::erase(uint32_t s) {
  KVS_CHECK(present_[s] != 0);
  drop(s);
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
  if (area_.num_used() < listed) return internal_error("host tier: holds untaken host blocks");
  return Status::ok();
}

}  // namespace kvs
