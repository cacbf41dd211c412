// TierBridge: what the prefix cache tells the lower tiers (src/tiers/), and nothing else.
//
// With lower tiers on (KvCacheConfig::tier_keys) every cached block of the pool carries a tier
// identity (tier_key.h): a key chained from the tenant's root key through the block's tokens,
// stable across restarts and processes, unlike the pool's own block keys, which are salted per
// process. The bridge keeps, per block:
//   - the identity (and how many prefix hits the block served: the disk tier's admission rule),
//   - a log of the cached blocks eviction dropped, with their tokens (write-back: their bytes are
//     intact until the transfers of the step that evicted them run),
//   - a log of the blocks that became cached by being computed (write-through),
//   - a log of cache events (stored / removed, per tier key), which KV events publish. The same
//     chain position can be cached twice (a sequence that found a block cached by another after
//     computing its own), so "stored" is logged for the first copy and "removed" for the last.
// The tier chains a lookup walks down the tiers are computed here too (chain()).
//
// Accounting only: the bridge never sees KV bytes. Thread safety: none; the manager owns it.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"
#include "kvcache/block_pool.h"
#include "kvcache/tier_key.h"

namespace kvs {

// A change of the cache an external indexer mirrors (KV events), by tier key.
struct CacheEvent {
  bool stored = true;  // false: removed
  uint64_t key = 0;    // the block's tier key (tier_key.h)
  uint64_t parent_key = 0;
  bool chain_start = false;     // parent_key is the chain's root, not a block
  std::vector<int32_t> tokens;  // stored events only
};

// A cached block eviction dropped, as it was.
struct EvictedBlock {
  BlockId block;
  TierBlockMeta meta;
  std::vector<int32_t> tokens;
};

struct TierBridgeConfig {
  TierSecrets secrets;
  uint64_t tier_namespace = 0;  // tier_namespace(): model, KV formats, block size
  bool log_completed = false;   // log computed blocks (take_completed): write-through
  bool log_events = false;      // log cache events (take_events)
};

class TierBridge {
 public:
  TierBridge(uint32_t num_blocks, uint32_t block_size, TierBridgeConfig config);

  // The tier identities of the prompt's first `max_blocks` full blocks.
  [[nodiscard]] std::vector<TierBlockMeta> chain(std::span<const int32_t> prompt,
                                                 std::string_view cache_salt,
                                                 uint32_t max_blocks) const;
  // The key a tenant's chain starts from, and its salt check.
  [[nodiscard]] uint64_t root_key(std::string_view cache_salt) const;
  [[nodiscard]] uint64_t salt_check(std::string_view cache_salt) const;

  // Block b entered the cache with this identity: computed by a sequence (`computed`), or
  // loaded from a tier. chain_start: it is the first block of its chain.
  void on_cached(BlockId b, const TierBlockMeta& meta, std::span<const int32_t> tokens,
                 bool chain_start, bool computed);
  // Block b (cached, holding these tokens) leaves the cache.
  void on_erased(BlockId b, std::span<const int32_t> tokens);
  void count_hit(BlockId b) { ++meta_[b.value].hits; }
  [[nodiscard]] const TierBlockMeta& meta(BlockId b) const { return meta_[b.value]; }

  [[nodiscard]] std::vector<EvictedBlock> take_evicted() { return std::exchange(evicted_, {}); }
  [[nodiscard]] std::vector<BlockId> take_completed() { return std::exchange(completed_, {}); }
  [[nodiscard]] std::vector<CacheEvent> take_events() { return std::exchange(events_, {}); }

  // `cached` says which blocks the prefix cache holds: exactly those have an identity, and each
  // tier key's copy count is the number of cached blocks with that key. An error names the
  // broken invariant.
  template <typename IsCached>
  [[nodiscard]] Status check_integrity(IsCached&& cached) const {
    std::vector<uint8_t> flags(meta_.size());
    for (uint32_t b = 0; b < flags.size(); ++b) flags[b] = cached(BlockId{b}) ? 1 : 0;
    return check_integrity_of(flags);
  }

 private:
  [[nodiscard]] Status check_integrity_of(std::span<const uint8_t> cached) const;

  uint32_t block_size_;
  TierBridgeConfig config_;
  std::vector<TierBlockMeta> meta_;  // per block; {} when not cached
  std::vector<EvictedBlock> evicted_;
  std::vector<BlockId> completed_;
  std::vector<CacheEvent> events_;
  std::unordered_map<uint64_t, uint32_t> copies_;  // tier key -> cached blocks with it
};

}  // namespace kvs
