// PrefixCache: the index of cached full blocks (exact-match automatic prefix caching).
//
// Per cached block it stores its key, its token ids, its parent (block id + generation) and its
// tenant. Two flat open-addressing maps find candidates:
//   key index:   block key -> blocks with that key (a chain: more than one only on collision)
//   child index: child_bucket_key(parent key, first token) -> cached children starting with it
//                (for partial-block reuse)
// A candidate is accepted only if tokens, parent and tenant all match, so a colliding key never
// yields a wrong block. A block's generation is bumped when it leaves the cache, so a child whose
// parent was evicted (and maybe re-used for other tokens) can never be matched through it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/status.h"
#include "kvcache/block_pool.h"
#include "kvcache/tier_bridge.h"

namespace kvs {

// A cached block at one moment of its life (id + generation). Invalid = the virtual root.
struct BlockRef {
  BlockId block;
  uint32_t generation = 0;
  [[nodiscard]] bool is_valid() const { return block.is_valid(); }
  friend constexpr bool operator==(BlockRef, BlockRef) = default;
};

// Open-addressing (linear probing, backward-shift deletion) map from a 64-bit key to a uint32.
class FlatIndex {
 public:
  explicit FlatIndex(uint32_t max_entries);
  [[nodiscard]] std::optional<uint32_t> find(uint64_t key) const;
  void set(uint64_t key, uint32_t value);  // insert or overwrite
  void erase(uint64_t key);                // precondition: present
  [[nodiscard]] uint32_t size() const { return size_; }

 private:
  static constexpr uint32_t kEmpty = UINT32_MAX;
  [[nodiscard]] size_t home(uint64_t key) const;
  std::vector<uint64_t> keys_;
  std::vector<uint32_t> values_;  // kEmpty = empty slot
  size_t mask_;
  uint32_t size_ = 0;
};

class PrefixCache : public BlockKeyObserver {
 public:
  PrefixCache(uint32_t num_blocks, uint32_t block_size);

  // BlockKeyObserver: the pool evicted b (its key goes), and asks whether b is keyed.
  void on_evicted(BlockId b) override { erase(b); }
  [[nodiscard]] bool holds_key(BlockId b) const override { return contains(b); }

  [[nodiscard]] uint32_t size() const { return size_; }
  [[nodiscard]] bool contains(BlockId b) const { return cached_[b.value] != 0; }
  [[nodiscard]] BlockRef ref(BlockId b) const { return BlockRef{b, generation_[b.value]}; }
  [[nodiscard]] uint64_t key(BlockId b) const { return key_[b.value]; }
  [[nodiscard]] std::span<const int32_t> tokens(BlockId b) const {
    return {tokens_.data() + size_t{b.value} * block_size_, block_size_};
  }

  // The cached block for this chain position, or nullopt.
  [[nodiscard]] std::optional<BlockId> find(uint64_t key, BlockRef parent, TenantId tenant,
                                            std::span<const int32_t> tokens) const;

  struct PartialMatch {
    BlockId block;
    uint32_t num_tokens = 0;  // 0 < num_tokens <= max_tokens
  };
  // Among cached children of `parent` (whose key is parent_key), the one sharing the longest
  // prefix with `tokens`, capped at max_tokens; looks at no more than kMaxPartialCandidates.
  static constexpr uint32_t kMaxPartialCandidates = 32;
  [[nodiscard]] std::optional<PartialMatch> find_partial(uint64_t parent_key, BlockRef parent,
                                                         TenantId tenant,
                                                         std::span<const int32_t> tokens,
                                                         uint32_t max_tokens) const;

  // Caches full block b (not yet cached). If an equal entry exists (same key, parent, tenant,
  // tokens) nothing is inserted and that block is returned.
  std::optional<BlockId> insert(BlockId b, uint64_t key, uint64_t parent_key, BlockRef parent,
                                TenantId tenant, std::span<const int32_t> tokens);
  // Drops b from the cache (precondition: cached) and bumps its generation.
  void erase(BlockId b);

  // Both indexes list exactly the cached blocks, each under its own key.
  [[nodiscard]] Status check_integrity() const;

  // Lower tiers: every erased block is reported to the bridge (tier_bridge.h), which keeps the
  // blocks' tier identities. Null = no tiers.
  void set_tier_bridge(TierBridge* bridge) { bridge_ = bridge; }

 private:
  static constexpr uint32_t kNil = UINT32_MAX;
  struct Links {
    uint32_t prev = kNil;
    uint32_t next = kNil;
  };
  void link(FlatIndex& index, std::vector<Links>& links, uint64_t k, uint32_t b);
  void unlink(FlatIndex& index, std::vector<Links>& links, uint64_t k, uint32_t b);

  uint32_t block_size_;
  uint32_t size_ = 0;
  std::vector<uint8_t> cached_;
  std::vector<uint32_t> generation_;
  std::vector<uint64_t> key_;
  std::vector<uint64_t> child_key_;
  std::vector<BlockRef> parent_;
  std::vector<uint32_t> tenant_;
  std::vector<int32_t> tokens_;  // [num_blocks][block_size]
  FlatIndex key_index_;
  FlatIndex child_index_;
  std::vector<Links> key_links_;
  std::vector<Links> child_links_;
  TierBridge* bridge_ = nullptr;
};

}  // namespace kvs
