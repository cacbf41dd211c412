// BlockPool: the accounting of the fixed set of KV blocks (never their bytes).
//
// Every block is in exactly one state:
//   kFree        refcount 0, no prefix-cache key; in the free list (allocated first).
//   kCachedFree  refcount 0, keyed in the prefix cache; in the eviction LRU (global and its
//                owner tenant's), reusable by a cache hit until evicted.
//   kInUse       refcount >= 1 (= number of block-table references); keyed or not.
//
// Both lists are intrusive doubly linked lists threaded through flat prev/next index arrays, so
// allocate, free, touch (a cached-free hit) and evict are O(1) with no node allocation.
// Eviction takes the least recently freed cached-free block; callers free a sequence's blocks in
// reverse order so that a chain's tail is evicted before its parent.
//
// Tenants: every block is owned by the tenant that allocated it (hits and forks never cross
// tenants, so all references to a block come from its owner). A tenant "holds" the blocks it
// owns that are in use or cached-free. With a quota, a tenant holding `quota` blocks can only
// recycle its own cached-free blocks; when the pool must evict for a tenant under quota, it
// first evicts from tenants holding more than their fair share (see allocate()).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace kvs {

// Index of a KV block in the pool. The slot of token t of block b is b.value * block_size + t.
struct BlockId {
  static constexpr uint32_t kInvalidValue = UINT32_MAX;
  uint32_t value = kInvalidValue;

  [[nodiscard]] static constexpr BlockId invalid() { return BlockId{}; }
  [[nodiscard]] constexpr bool is_valid() const { return value != kInvalidValue; }
  friend constexpr bool operator==(BlockId, BlockId) = default;
};

// Dense tenant index assigned by the manager (one per distinct cache_salt).
struct TenantId {
  uint32_t value = 0;
  friend constexpr bool operator==(TenantId, TenantId) = default;
};

enum class BlockState : uint8_t { kFree, kCachedFree, kInUse };

// What the pool tells about keyed blocks, and asks when it checks itself. The prefix index
// (prefix_cache.h) implements it; the pool knows nothing else of it.
class BlockKeyObserver {
 public:
  virtual ~BlockKeyObserver() = default;
  // A keyed cached-free block was evicted for reuse: its key must go.
  virtual void on_evicted(BlockId b) = 0;
  // Whether the index holds a key for b (check_integrity: the pool's keyed flag must agree).
  [[nodiscard]] virtual bool holds_key(BlockId b) const = 0;
};

class BlockPool {
 public:
  // quota_blocks: 0 = no per-tenant quota. `keys` (not owned, may be null) is told about
  // evictions: a keyed block leaving the pool's reuse set is erased from it.
  BlockPool(uint32_t num_blocks, uint32_t quota_blocks, BlockKeyObserver* keys);

  [[nodiscard]] uint32_t num_blocks() const { return num_blocks_; }
  [[nodiscard]] uint32_t num_free() const { return num_free_; }
  [[nodiscard]] uint32_t num_cached_free() const { return num_cached_free_; }
  [[nodiscard]] uint32_t num_in_use() const { return num_blocks_ - num_free_ - num_cached_free_; }
  [[nodiscard]] uint64_t num_evictions() const { return num_evictions_; }

  [[nodiscard]] BlockState state(BlockId b) const { return state_[b.value]; }
  [[nodiscard]] uint32_t refcount(BlockId b) const { return refcount_[b.value]; }
  [[nodiscard]] bool is_keyed(BlockId b) const { return keyed_[b.value] != 0; }
  [[nodiscard]] TenantId owner(BlockId b) const { return TenantId{owner_[b.value]}; }

  // Tenants must be registered (densely, 0..n-1) before they allocate.
  void add_tenant();
  // Reuses the slot of a tenant that holds nothing (precondition: tenant_held(t) == 0) for a
  // new tenant: its counters start from zero.
  void reset_tenant(TenantId t);
  [[nodiscard]] uint32_t num_tenants() const { return static_cast<uint32_t>(tenants_.size()); }
  [[nodiscard]] uint32_t tenant_held(TenantId t) const { return tenants_[t.value].held; }
  [[nodiscard]] uint32_t tenant_cached_free(TenantId t) const {
    return tenants_[t.value].cached_free;
  }
  [[nodiscard]] uint64_t tenant_evicted(TenantId t) const { return tenants_[t.value].evicted; }

  // Blocks a tenant that holds nothing yet could obtain right now.
  [[nodiscard]] uint32_t available_for_new_tenant() const;
  // How many blocks `t` could obtain right now by allocate() (free + evictable, within quota),
  // not counting the cached-free blocks listed in `exclude` (e.g. blocks a prefix hit would
  // take out of the LRU; each listed block must be cached-free and appear once).
  [[nodiscard]] uint32_t available_for(TenantId t, std::span<const BlockId> exclude = {}) const;

  // Takes a block for tenant `t` with refcount 1, or nullopt when none is available
  // (available_for(t) == 0). Order: if `t` is at its quota, its own LRU cached-free block;
  // else a free block; else the LRU cached-free block of the tenant most over its fair share;
  // else the global LRU cached-free block. An evicted block is erased from the prefix cache.
  [[nodiscard]] std::optional<BlockId> allocate(TenantId t);

  // refcount++ of an in-use block, or a cached-free block leaving the LRU (a prefix hit).
  void add_ref(BlockId b);
  // refcount--; at zero the block goes to the LRU tail (keyed) or the free list (not keyed).
  void release(BlockId b);
  // Marks an in-use block as keyed in the prefix cache (it will go cached-free when released).
  void set_keyed(BlockId b);

  // Verifies every invariant: exactly one state per block, list membership and lengths,
  // refcount == expected_refcounts[b] (the manager's count of block-table references), keyed
  // blocks == blocks in the prefix cache, per-tenant counters == a recount.
  [[nodiscard]] Status check_integrity(std::span<const uint32_t> expected_refcounts) const;

 private:
  static constexpr uint32_t kNil = UINT32_MAX;
  // Two intrusive lists per block: kList 0 = free list or global LRU, 1 = per-tenant LRU.
  struct Links {
    uint32_t prev = kNil;
    uint32_t next = kNil;
  };
  struct ListHead {
    uint32_t head = kNil;  // least recently freed (evicted first)
    uint32_t tail = kNil;
    uint32_t size = 0;
  };
  struct Tenant {
    ListHead lru;       // this tenant's cached-free blocks, LRU order
    uint32_t held = 0;  // owned blocks in use or cached-free
    uint32_t cached_free = 0;
    uint64_t evicted = 0;
  };

  void push_back(ListHead& list, std::vector<Links>& links, uint32_t b);
  void unlink(ListHead& list, std::vector<Links>& links, uint32_t b);
  [[nodiscard]] uint32_t fair_share() const;
  [[nodiscard]] bool at_quota(TenantId t) const;
  // Takes cached-free block b out of the LRUs and hands it to tenant t (refcount 1).
  void evict(uint32_t b, TenantId t);
  void take(uint32_t b, TenantId t);  // gives b (just unlinked) to t with refcount 1

  uint32_t num_blocks_;
  uint32_t quota_;  // 0 = none
  BlockKeyObserver* keys_;
  std::vector<BlockState> state_;
  std::vector<uint32_t> refcount_;
  std::vector<uint8_t> keyed_;
  std::vector<uint32_t> owner_;
  std::vector<Links> links_;         // free list / global LRU
  std::vector<Links> tenant_links_;  // per-tenant LRU
  ListHead free_list_;
  ListHead lru_;
  std::vector<Tenant> tenants_;
  uint32_t num_free_ = 0;
  uint32_t num_cached_free_ = 0;
  uint32_t num_active_tenants_ = 0;  // tenants with held > 0
  uint64_t num_evictions_ = 0;
};

}  // namespace kvs
