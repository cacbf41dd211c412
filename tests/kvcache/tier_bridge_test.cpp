// TierBridge: the lower tiers' view of the prefix cache. Exact event order for copies of one
// chain position; then random cache/erase sequences against a plain model (a multiset of tier
// keys), with the integrity check after every operation and each invariant broken once.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <vector>

#include "kvcache/prefix_cache.h"
#include "kvcache/tier_bridge.h"

namespace kvs {
namespace {

constexpr TenantId T0{0};
constexpr uint32_t kBs = 4;

std::vector<int32_t> block_tokens(int32_t first) {
  return {first, first + 1, first + 2, first + 3};
}

TierBridgeConfig logging_config() {
  return {.secrets = {}, .tier_namespace = 1, .log_completed = true, .log_events = true};
}

// KV events: one "stored" for the first cached copy of a tier key, one "removed" for the last.
TEST(TierBridge, EventsNameEachTierKeyOnceWhileAnyCopyIsCached) {
  PrefixCache cache(4, kBs);
  TierBridge bridge(4, kBs, logging_config());
  cache.set_tier_bridge(&bridge);
  // Two blocks with the same tier identity under different in-memory parents (two copies of one
  // chain position), and a third of its own.
  EXPECT_FALSE(cache.insert(BlockId{0}, 9, 1, BlockRef{}, T0, block_tokens(1)).has_value());
  EXPECT_FALSE(cache.insert(BlockId{1}, 10, 2, BlockRef{}, T0, block_tokens(1)).has_value());
  EXPECT_FALSE(cache.insert(BlockId{2}, 11, 3, BlockRef{}, T0, block_tokens(2)).has_value());
  bridge.on_cached(BlockId{0}, {.key = 77, .parent_key = 5}, block_tokens(1), true, true);
  bridge.on_cached(BlockId{1}, {.key = 77, .parent_key = 5}, block_tokens(1), true, false);
  bridge.on_cached(BlockId{2}, {.key = 78, .parent_key = 77}, block_tokens(2), false, true);
  EXPECT_EQ(bridge.take_completed(), (std::vector<BlockId>{BlockId{0}, BlockId{2}}));
  std::vector<CacheEvent> e = bridge.take_events();
  ASSERT_EQ(e.size(), 2u);
  EXPECT_TRUE(e[0].stored && e[0].key == 77 && e[0].parent_key == 5 && e[0].chain_start);
  EXPECT_EQ(e[0].tokens, block_tokens(1));
  EXPECT_TRUE(e[1].stored && e[1].key == 78 && !e[1].chain_start);
  cache.erase(BlockId{0});
  EXPECT_TRUE(bridge.take_events().empty());  // block 1 still holds key 77
  cache.erase(BlockId{2});
  cache.erase(BlockId{1});
  e = bridge.take_events();
  ASSERT_EQ(e.size(), 2u);
  EXPECT_TRUE(!e[0].stored && e[0].key == 78);
  EXPECT_TRUE(!e[1].stored && e[1].key == 77);
  // Every erased block is logged for write-down with its identity and tokens, in order.
  const std::vector<EvictedBlock> ev = bridge.take_evicted();
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[0].block, BlockId{0});
  EXPECT_EQ(ev[0].meta.key, 77u);
  EXPECT_EQ(ev[1].meta.key, 78u);
  EXPECT_EQ(ev[1].tokens, block_tokens(2));
  // A reused block starts without a tier identity.
  EXPECT_EQ(bridge.meta(BlockId{0}).key, 0u);
  EXPECT_TRUE(bridge.check_integrity([&](BlockId b) { return cache.contains(b); }).is_ok());
}

TEST(TierBridge, ChainsAreStablePerTenantAndSeparateTenants) {
  TierBridge a(4, kBs, {.secrets = {}, .tier_namespace = 1});
  TierBridge b(4, kBs, {.secrets = {}, .tier_namespace = 1});
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const std::vector<TierBlockMeta> ca = a.chain(prompt, "x", 10);
  ASSERT_EQ(ca.size(), 2u);  // full blocks only
  EXPECT_EQ(ca[0].parent_key, a.root_key("x"));
  EXPECT_EQ(ca[1].parent_key, ca[0].key);
  EXPECT_EQ(ca[0].salt_check, a.salt_check("x"));
  // Another bridge over the same namespace computes the same chain (restarts, other replicas).
  const std::vector<TierBlockMeta> cb = b.chain(prompt, "x", 1);
  ASSERT_EQ(cb.size(), 1u);
  EXPECT_EQ(cb[0].key, ca[0].key);
  // Another tenant's chain shares nothing.
  const std::vector<TierBlockMeta> other = a.chain(prompt, "y", 10);
  EXPECT_NE(other[0].key, ca[0].key);
  EXPECT_NE(other[0].salt_check, ca[0].salt_check);
  // Another namespace (model, formats or block size) neither.
  TierBridge c(4, kBs, {.secrets = {}, .tier_namespace = 2});
  EXPECT_NE(c.chain(prompt, "x", 1)[0].key, ca[0].key);
}

// Random blocks enter and leave the cache under a small set of tier keys (so that copies of one
// key are common); the model is the multiset of keys of cached blocks. Events must flip exactly
// when a key's count goes 0 -> 1 and 1 -> 0; the write-down log lists every erased block.
TEST(TierBridge, RandomCacheAndEraseMatchTheModel) {
  constexpr uint32_t kBlocks = 32;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 rng(seed);
    PrefixCache cache(kBlocks, kBs);
    TierBridge bridge(kBlocks, kBs, logging_config());
    cache.set_tier_bridge(&bridge);
    std::map<uint32_t, uint64_t> cached;  // block id -> tier key
    std::multiset<uint64_t> keys;
    uint64_t next_pool_key = 1;
    for (int op = 0; op < 2000; ++op) {
      const BlockId b{static_cast<uint32_t>(rng() % kBlocks)};
      if (!cache.contains(b)) {
        const uint64_t tier_key = 100 + rng() % 6;
        const int32_t first = static_cast<int32_t>(rng() % 1000);
        ASSERT_FALSE(cache.insert(b, next_pool_key++, 0, BlockRef{}, T0, block_tokens(first)));
        const bool was_new = keys.count(tier_key) == 0;
        const bool computed = rng() % 2 == 0;
        bridge.on_cached(b, {.key = tier_key, .parent_key = 1}, block_tokens(first), true,
                         computed);
        cached[b.value] = tier_key;
        keys.insert(tier_key);
        const std::vector<CacheEvent> e = bridge.take_events();
        ASSERT_EQ(e.size(), was_new ? 1u : 0u);
        if (was_new) {
          EXPECT_TRUE(e[0].stored && e[0].key == tier_key);
        }
        const std::vector<BlockId> done = bridge.take_completed();
        EXPECT_EQ(done.size(), computed ? 1u : 0u);
      } else {
        const uint64_t tier_key = cached.at(b.value);
        const std::vector<int32_t> tokens(cache.tokens(b).begin(), cache.tokens(b).end());
        cache.erase(b);
        cached.erase(b.value);
        keys.erase(keys.find(tier_key));
        const std::vector<CacheEvent> e = bridge.take_events();
        const bool last = keys.count(tier_key) == 0;
        ASSERT_EQ(e.size(), last ? 1u : 0u);
        if (last) {
          EXPECT_TRUE(!e[0].stored && e[0].key == tier_key);
        }
        const std::vector<EvictedBlock> ev = bridge.take_evicted();
        ASSERT_EQ(ev.size(), 1u);
        EXPECT_EQ(ev[0].block, b);
        EXPECT_EQ(ev[0].meta.key, tier_key);
        EXPECT_EQ(ev[0].tokens, tokens);
      }
      if (rng() % 4 == 0 && cache.contains(b)) bridge.count_hit(b);
      const Status st = bridge.check_integrity([&](BlockId x) { return cache.contains(x); });
      ASSERT_TRUE(st.is_ok()) << "seed " << seed << " op " << op << ": " << st.message();
      for (const auto& [block, key] : cached) ASSERT_EQ(bridge.meta(BlockId{block}).key, key);
    }
  }
}

TEST(TierBridge, IntegrityNamesEachBrokenInvariant) {
  PrefixCache cache(4, kBs);
  TierBridge bridge(4, kBs, logging_config());
  cache.set_tier_bridge(&bridge);
  ASSERT_FALSE(cache.insert(BlockId{0}, 9, 1, BlockRef{}, T0, block_tokens(1)));
  bridge.on_cached(BlockId{0}, {.key = 77}, block_tokens(1), true, true);
  auto is_cached = [&](BlockId b) { return cache.contains(b); };
  ASSERT_TRUE(bridge.check_integrity(is_cached).is_ok());
  // The cache holds a block the bridge has no identity for.
  ASSERT_FALSE(cache.insert(BlockId{1}, 10, 1, BlockRef{}, T0, block_tokens(2)));
  Status st = bridge.check_integrity(is_cached);
  EXPECT_NE(st.message().find("cached without a tier identity"), std::string::npos) << st.message();
  // The bridge keeps an identity for a block the cache does not hold.
  st = bridge.check_integrity([](BlockId b) { return b.value == 1; });
  EXPECT_NE(st.message().find("not cached but keeps a tier identity"), std::string::npos)
      << st.message();
  // Copy counts that disagree with the blocks: a second block claims key 77 behind its back.
  bridge.on_cached(BlockId{1}, {.key = 78}, block_tokens(2), false, true);
  ASSERT_TRUE(bridge.check_integrity(is_cached).is_ok());
  st = bridge.check_integrity([](BlockId b) { return b.value == 0; });
  EXPECT_FALSE(st.is_ok());
}

}  // namespace
}  // namespace kvs
