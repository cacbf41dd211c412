// HostTier: the accounting of L2, the host-RAM tier under the prefix cache (never its bytes).
//
// It holds full, hashed blocks that left the device pool, keyed by their tier key (tier_key.h).
// Its memory is blocks of the one host area (HostBlockPool) that preemption swap also uses; each
// host block holds `slots_per_block` entries (1, or more when entries are demoted to a smaller
// element format: --kv-offload-dtype). Slot s is entry s % slots_per_block of host block
// s / slots_per_block. The tier takes a host block when it has no free slot, while it holds
// fewer than capacity entries and the area has a free block, and gives a host block back as soon
// as its last entry leaves, so swap and the tier never hold the same block.
//
// Entries are kept in LRU order; a lookup hit moves an entry to the MRU end. O(1) per operation.
// Like the device pool, this is accounting decided at schedule time: the bytes of a slot move
// only in the step's transfer order (kv_transfer.h), which is what makes evicting an entry and
// handing its slot to another in the same step safe.
//
// Pins: a slot that a step's plan will read (a load found at schedule time) is pinned until the
// plan has run (unpin_all). evict_lru never takes a pinned entry, so no store queued later in the
// same step can reuse the slot before its load reads it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "kvcache/tier_key.h"
#include "tiers/host_block_pool.h"

namespace kvs {

class HostTier {
 public:
  HostTier(HostBlockPool& area, uint32_t block_size, uint32_t capacity_entries,
           uint32_t slots_per_block = 1);

  [[nodiscard]] uint32_t capacity() const { return capacity_; }
  [[nodiscard]] uint32_t slots_per_block() const { return per_block_; }
  [[nodiscard]] uint32_t host_blocks_held() const { return blocks_held_; }
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
  // Drops the least recently used entry that is not pinned (its host block goes back to the
  // area if it was the block's last entry); the caller queues whatever must read the slot's
  // bytes (demotion to disk) before the slot's next use. nullopt: no unpinned entry.
  std::optional<Evicted> evict_lru();
  // Drops one entry. Precondition: present and not pinned.
  void erase(uint32_t slot);

  // Keeps a present entry from eviction until unpin_all (see the header comment).
  void pin(uint32_t slot);
  void unpin_all();
  [[nodiscard]] bool pinned(uint32_t slot) const { return pinned_[slot] != 0; }
  [[nodiscard]] size_t num_pinned() const { return pinned_list_.size(); }

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
  void push_free(uint32_t slot);
  void remove_free(uint32_t slot);

  HostBlockPool& area_;
  uint32_t block_size_;
  uint32_t per_block_;
  uint32_t capacity_;
  uint32_t blocks_held_ = 0;
  std::vector<uint32_t> block_used_;              // per host block: entries in it
  std::vector<uint32_t> free_slots_;              // free slots of the host blocks the tier holds
  std::vector<uint32_t> free_pos_;                // per slot: its index in free_slots_, or kNil
  std::unordered_map<uint64_t, uint32_t> index_;  // key -> slot
  std::vector<TierBlockMeta> meta_;               // per slot
  std::vector<int32_t> tokens_;                   // [slots][block_size]
  std::vector<uint8_t> present_;
  std::vector<uint8_t> pinned_;        // per slot
  std::vector<uint32_t> pinned_list_;  // the pinned slots
  std::vector<Links> links_;
  uint32_t head_ = kNil;  // least recently used
  uint32_t tail_ = kNil;
};

}  // namespace kvs
