// HostTier: the accounting of L2, the host-RAM tier under the prefix cache (never its bytes).
//
// It holds full, hashed blocks that left the device pool, keyed by their tier key (tier_key.h).
// Its slots are blocks of the one host area (HostBlockPool) that preemption swap also uses: the
// tier takes a slot per entry while it holds fewer than capacity_blocks entries and the area has
// a free block, so swap (which reserves its share) and the tier never hold the same block.
//
// Entries are kept in LRU order; a lookup hit moves an entry to the MRU end. O(1) per operation.
// Like the device pool, this is accounting decided at schedule time: the bytes of a slot move
// only in the step's transfer order (kv_transfer.h), which is what makes evicting an entry and
// handing its slot to another in the same step safe.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "kvcache/host_block_pool.h"
#include "kvcache/tier_key.h"

namespace kvs {

class HostTier {
 public:
  HostTier(HostBlockPool& area, uint32_t block_size, uint32_t capacity_blocks);

  [[nodiscard]] uint32_t capacity_blocks() const { return capacity_; }
  [[nodiscard]] uint32_t size() const { return static_cast<uint32_t>(index_.size()); }
  [[nodiscard]] bool contains(uint64_t key) const { return index_.contains(key); }

  // The slot holding this chain position (key, parent key, salt check and tokens all match).
  [[nodiscard]] std::optional<uint32_t> find(const TierBlockMeta& want,
                                             std::span<const int32_t> tokens) const;
  // A hit: the entry becomes most recently used and its hit count grows.
  void touch(uint32_t slot);
  [[nodiscard]] const TierBlockMeta& meta(uint32_t slot) const { return meta_[slot]; }
  [[nodiscard]] std::span<const int32_t> tokens(uint32_t slot) const {
    return {tokens_.data() + size_t{slot} * block_size_, block_size_};
  }

  // A slot for a new entry (precondition: key not present), or nullopt when the tier is at
  // capacity or the host area has no free block: the caller evicts first (evict_lru).
  [[nodiscard]] std::optional<uint32_t> insert(const TierBlockMeta& meta,
                                               std::span<const int32_t> tokens);
  struct Evicted {
    uint32_t slot = 0;
    TierBlockMeta meta;
    std::vector<int32_t> tokens;
  };
  // Drops the least recently used entry and gives its slot back to the host area; the caller
  // queues whatever must read the slot's bytes (demotion to disk) before the slot's next use.
  // nullopt: the tier is empty.
  std::optional<Evicted> evict_lru();
  // Drops one entry. Precondition: present.
  void erase(uint32_t slot);

  // Calls fn(slot) for every entry from most to least recently used.
  template <typename Fn>
  void for_each_mru(Fn&& fn) const {
    for (uint32_t s = tail_; s != kNil; s = links_[s].prev) fn(s);
  }

  // Index, LRU list and the host area agree (O(entries)).
  [[nodiscard]] Status check_integrity() const;

 private:
  static constexpr uint32_t kNil = UINT32_MAX;
  struct Links {
    uint32_t prev = kNil;
    uint32_t next = kNil;
  };
  void link_back(uint32_t slot);
  void unlink(uint32_t slot);
  void drop(uint32_t slot);

  HostBlockPool& area_;
  uint32_t block_size_;
  uint32_t capacity_;
  std::unordered_map<uint64_t, uint32_t> index_;  // key -> slot
  std::vector<TierBlockMeta> meta_;               // per host block
  std::vector<int32_t> tokens_;                   // [host blocks][block_size]
  std::vector<uint8_t> present_;
  std::vector<Links> links_;
  uint32_t head_ = kNil;  // least recently used
  uint32_t tail_ = kNil;
};

}  // namespace kvs
