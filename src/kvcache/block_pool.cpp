#include "kvcache/block_pool.h"

#include <algorithm>
#include <string>

namespace kvs {

BlockPool::BlockPool(uint32_t num_blocks, uint32_t quota_blocks, BlockKeyObserver* keys)
    : num_blocks_(num_blocks),
      quota_(quota_blocks),
      keys_(keys),
      state_(num_blocks, BlockState::kFree),
      refcount_(num_blocks, 0),
      keyed_(num_blocks, 0),
      owner_(num_blocks, 0),
      links_(num_blocks),
      tenant_links_(num_blocks) {
  KVS_CHECK(num_blocks < BlockId::kInvalidValue);
  // Ascending ids: a fresh pool hands out block 0, 1, 2, ...
  for (uint32_t b = 0; b < num_blocks; ++b) push_back(free_list_, links_, b);
  num_free_ = num_blocks;
}

void BlockPool::push_back(ListHead& list, std::vector<Links>& links, uint32_t b) {
  links[b] = Links{list.tail, kNil};
  if (list.tail != kNil) {
    links[list.tail].next = b;
  } else {
    list.head = b;
  }
  list.tail = b;
  ++list.size;
}

void BlockPool::unlink(ListHead& list, std::vector<Links>& links, uint32_t b) {
  const Links l = links[b];
  if (l.prev != kNil) {
    links[l.prev].next = l.next;
  } else {
    list.head = l.next;
  }
  if (l.next != kNil) {
    links[l.next].prev = l.prev;
  } else {
    list.tail = l.prev;
  }
  links[b] = Links{};
  --list.size;
}

void BlockPool::add_tenant() { tenants_.emplace_back(); }

void BlockPool::reset_tenant(TenantId t) {
  KVS_CHECK_MSG(tenants_[t.value].held == 0, "reset_tenant of a tenant that holds blocks");
  tenants_[t.value] = Tenant{};
}

uint32_t BlockPool::fair_share() const {
  const uint32_t active = std::max<uint32_t>(1, num_active_tenants_);
  const uint32_t share = (num_blocks_ + active - 1) / active;
  return quota_ != 0 ? std::min(share, quota_) : share;
}

bool BlockPool::at_quota(TenantId t) const {
  return quota_ != 0 && tenants_[t.value].held >= quota_;
}

uint32_t BlockPool::available_for_new_tenant() const {
  const uint32_t any = num_free_ + num_cached_free_;
  return quota_ != 0 ? std::min(quota_, any) : any;
}

uint32_t BlockPool::available_for(TenantId t, std::span<const BlockId> exclude) const {
  // Every allocation takes a free block, another tenant's cached-free block (both raise t's
  // held count, so at most quota - held of them) or one of t's own cached-free blocks. Hence
  // exactly min(room, free + others') + own blocks are obtainable, whatever the order.
  uint32_t own_excluded = 0;
  for (BlockId b : exclude) {
    KVS_DCHECK(state_[b.value] == BlockState::kCachedFree);
    own_excluded += owner_[b.value] == t.value;
  }
  const uint32_t cached = num_cached_free_ - static_cast<uint32_t>(exclude.size());
  if (quota_ == 0) return num_free_ + cached;
  const Tenant& ten = tenants_[t.value];
  const uint32_t own = ten.cached_free - own_excluded;
  const uint32_t room = ten.held < quota_ ? quota_ - ten.held : 0;
  return std::min(room, num_free_ + cached - own) + own;
}

void BlockPool::take(uint32_t b, TenantId t) {
  state_[b] = BlockState::kInUse;
  refcount_[b] = 1;
  owner_[b] = t.value;
  if (tenants_[t.value].held++ == 0) ++num_active_tenants_;
}

void BlockPool::evict(uint32_t b, TenantId t) {
  KVS_DCHECK(state_[b] == BlockState::kCachedFree && keyed_[b]);
  Tenant& old = tenants_[owner_[b]];
  unlink(lru_, links_, b);
  unlink(old.lru, tenant_links_, b);
  --num_cached_free_;
  --old.cached_free;
  ++old.evicted;
  if (--old.held == 0) --num_active_tenants_;
  ++num_evictions_;
  keyed_[b] = 0;
  if (keys_ != nullptr) keys_->on_evicted(BlockId{b});
  take(b, t);
}

std::optional<BlockId> BlockPool::allocate(TenantId t) {
  KVS_DCHECK(t.value < tenants_.size());
  if (at_quota(t)) {
    // A tenant at its quota only recycles its own cached blocks.
    const uint32_t own = tenants_[t.value].lru.head;
    if (own == kNil) return std::nullopt;
    evict(own, t);
    return BlockId{own};
  }
  if (free_list_.head != kNil) {
    const uint32_t b = free_list_.head;
    unlink(free_list_, links_, b);
    --num_free_;
    take(b, t);
    return BlockId{b};
  }
  if (lru_.head == kNil) return std::nullopt;
  uint32_t victim = lru_.head;
  if (quota_ != 0) {
    // Fair eviction: first the LRU block of the tenant most over its fair share.
    const uint32_t share = fair_share();
    uint32_t worst_excess = 0;
    for (const Tenant& ten : tenants_) {
      if (ten.cached_free != 0 && ten.held > share && ten.held - share > worst_excess) {
        worst_excess = ten.held - share;
        victim = ten.lru.head;
      }
    }
  }
  evict(victim, t);
  return BlockId{victim};
}

void BlockPool::add_ref(BlockId id) {
  const uint32_t b = id.value;
  if (state_[b] == BlockState::kCachedFree) {
    // A prefix hit on a cached-free block: it leaves the LRU in O(1).
    Tenant& ten = tenants_[owner_[b]];
    unlink(lru_, links_, b);
    unlink(ten.lru, tenant_links_, b);
    --num_cached_free_;
    --ten.cached_free;
    state_[b] = BlockState::kInUse;
    refcount_[b] = 1;
    return;
  }
  KVS_CHECK(state_[b] == BlockState::kInUse);
  ++refcount_[b];
}

void BlockPool::release(BlockId id) {
  const uint32_t b = id.value;
  KVS_CHECK(state_[b] == BlockState::kInUse && refcount_[b] > 0);
  if (--refcount_[b] != 0) return;
  Tenant& ten = tenants_[owner_[b]];
  if (keyed_[b]) {
    // Stays reusable by a prefix hit until the pool needs it.
    state_[b] = BlockState::kCachedFree;
    push_back(lru_, links_, b);
    push_back(ten.lru, tenant_links_, b);
    ++num_cached_free_;
    ++ten.cached_free;
  } else {
    state_[b] = BlockState::kFree;
    push_back(free_list_, links_, b);
    ++num_free_;
    if (--ten.held == 0) --num_active_tenants_;
  }
}

void BlockPool::set_keyed(BlockId b) {
  KVS_CHECK(state_[b.value] == BlockState::kInUse);
  keyed_[b.value] = 1;
}

namespace {
Status fail(const std::string& what) { return internal_error("block pool: " + what); }
std::string block_str(uint32_t b) { return "block " + std::to_string(b); }
}  // namespace

Status BlockPool::check_integrity(std::span<const uint32_t> expected_refcounts) const {
  if (expected_refcounts.size() != num_blocks_) return fail("refcount span has the wrong size");
  // Per-block state, refcount and key.
  for (uint32_t b = 0; b < num_blocks_; ++b) {
    const BlockState s = state_[b];
    if (refcount_[b] != expected_refcounts[b]) {
      return fail(block_str(b) + " refcount " + std::to_string(refcount_[b]) + " but " +
                  std::to_string(expected_refcounts[b]) + " block-table references");
    }
    if ((s == BlockState::kInUse) != (refcount_[b] > 0)) {
      return fail(block_str(b) + " state disagrees with refcount");
    }
    if (s == BlockState::kCachedFree && !keyed_[b])
      return fail(block_str(b) + " cached-free, no key");
    if (s == BlockState::kFree && keyed_[b]) return fail(block_str(b) + " free but keyed");
    if (keys_ != nullptr && (keyed_[b] != 0) != keys_->holds_key(BlockId{b})) {
      return fail(block_str(b) + " keyed flag disagrees with the hash index");
    }
    if (owner_[b] >= tenants_.size() && s != BlockState::kFree) {
      return fail(block_str(b) + " owned by an unknown tenant");
    }
  }
  // Lists: walk each, checking links, membership (each block at most once) and sizes.
  std::vector<uint8_t> seen(num_blocks_, 0);
  auto walk = [&](const ListHead& list, const std::vector<Links>& links, uint8_t mark,
                  BlockState want, uint32_t want_owner, const char* name) -> Status {
    uint32_t count = 0;
    uint32_t prev = kNil;
    for (uint32_t b = list.head; b != kNil; b = links[b].next) {
      if (b >= num_blocks_ || count > num_blocks_) return fail(std::string(name) + " corrupt");
      if (seen[b] & mark) return fail(std::string(name) + " visits " + block_str(b) + " twice");
      seen[b] |= mark;
      if (links[b].prev != prev) return fail(std::string(name) + " prev link of " + block_str(b));
      if (state_[b] != want) return fail(block_str(b) + " in " + name + " has the wrong state");
      if (want_owner != kNil && owner_[b] != want_owner) {
        return fail(block_str(b) + " in the wrong tenant's LRU");
      }
      prev = b;
      ++count;
    }
    if (list.tail != prev) return fail(std::string(name) + " tail");
    if (count != list.size) return fail(std::string(name) + " size counter");
    return Status::ok();
  };
  KVS_RETURN_IF_ERROR(walk(free_list_, links_, 1, BlockState::kFree, kNil, "free list"));
  KVS_RETURN_IF_ERROR(walk(lru_, links_, 2, BlockState::kCachedFree, kNil, "LRU"));
  for (uint32_t t = 0; t < tenants_.size(); ++t) {
    KVS_RETURN_IF_ERROR(
        walk(tenants_[t].lru, tenant_links_, 4, BlockState::kCachedFree, t, "tenant LRU"));
  }
  // Counters against a recount; every free block is in the free list, every cached-free block
  // in the LRU and in its tenant's LRU.
  uint32_t free = 0;
  uint32_t cached = 0;
  std::vector<uint32_t> held(tenants_.size(), 0);
  std::vector<uint32_t> tenant_cached(tenants_.size(), 0);
  for (uint32_t b = 0; b < num_blocks_; ++b) {
    switch (state_[b]) {
      case BlockState::kFree:
        ++free;
        if (seen[b] != 1) return fail(block_str(b) + " free but not (only) in the free list");
        break;
      case BlockState::kCachedFree:
        ++cached;
        ++held[owner_[b]];
        ++tenant_cached[owner_[b]];
        if (seen[b] != 6) return fail(block_str(b) + " cached-free but not (only) in the LRUs");
        break;
      case BlockState::kInUse:
        ++held[owner_[b]];
        if (seen[b] != 0) return fail(block_str(b) + " in use but in a free list");
        break;
    }
  }
  if (free != num_free_ || free != free_list_.size) return fail("free counter");
  if (cached != num_cached_free_ || cached != lru_.size) return fail("cached-free counter");
  uint32_t active = 0;
  for (uint32_t t = 0; t < tenants_.size(); ++t) {
    if (held[t] != tenants_[t].held) return fail("tenant " + std::to_string(t) + " held counter");
    if (tenant_cached[t] != tenants_[t].cached_free || tenant_cached[t] != tenants_[t].lru.size) {
      return fail("tenant " + std::to_string(t) + " cached-free counter");
    }
    if (quota_ != 0 && held[t] > quota_) return fail("tenant " + std::to_string(t) + " over quota");
    active += held[t] > 0;
  }
  if (active != num_active_tenants_) return fail("active tenant counter");
  return Status::ok();
}

}  // namespace kvs
