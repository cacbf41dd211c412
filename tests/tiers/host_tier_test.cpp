// HostTier: the L2 index and LRU against a simple model (a list in recency order), with the host
// area shared with swap-like allocations.
#include "tiers/host_tier.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <list>
#include <optional>
#include <random>
#include <set>

namespace kvs {
namespace {

constexpr uint32_t kBs = 4;

TierBlockMeta meta_of(uint64_t key) {
  return {.key = key, .parent_key = key * 31 + 7, .salt_check = 99, .hits = 0};
}
std::vector<int32_t> tokens_of(uint64_t key) {
  return {static_cast<int32_t>(key), 1, 2, static_cast<int32_t>(key % 7)};
}

TEST(HostTierTest, EvictsLeastRecentlyUsedAndMatchesOnlyTheSamePosition) {
  HostBlockPool area(8);
  HostTier tier(area, kBs, 3);
  for (uint64_t k = 1; k <= 3; ++k) ASSERT_TRUE(tier.insert(meta_of(k), tokens_of(k)));
  EXPECT_FALSE(tier.insert(meta_of(4), tokens_of(4)));  // at capacity
  const auto s1 = tier.find(meta_of(1), tokens_of(1));
  ASSERT_TRUE(s1);
  tier.touch(*s1);  // 1 becomes most recently used: 2 goes first
  EXPECT_EQ(tier.meta(*s1).hits, 1u);
  const auto e = tier.evict_lru();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->meta.key, 2u);
  EXPECT_EQ(e->tokens, tokens_of(2));
  EXPECT_TRUE(tier.insert(meta_of(4), tokens_of(4)));
  // Same key, other parent, salt or tokens: a miss, never another position's block.
  TierBlockMeta other = meta_of(1);
  other.parent_key ^= 1;
  EXPECT_FALSE(tier.find(other, tokens_of(1)));
  other = meta_of(1);
  other.salt_check ^= 1;
  EXPECT_FALSE(tier.find(other, tokens_of(1)));
  std::vector<int32_t> t = tokens_of(1);
  t[2] ^= 1;
  EXPECT_FALSE(tier.find(meta_of(1), t));
  EXPECT_TRUE(tier.check_integrity().is_ok());
}

TEST(HostTierTest, SharesTheHostAreaWithSwap) {
  HostBlockPool area(4);
  HostTier tier(area, kBs, 4);
  auto swap = area.allocate(3);  // swap holds 3 of the 4 host blocks
  ASSERT_TRUE(swap);
  EXPECT_TRUE(tier.insert(meta_of(1), tokens_of(1)));
  EXPECT_FALSE(tier.insert(meta_of(2), tokens_of(2)));  // no host block free
  area.free(*swap);
  EXPECT_TRUE(tier.insert(meta_of(2), tokens_of(2)));
  EXPECT_TRUE(tier.check_integrity().is_ok());
  EXPECT_TRUE(area.check_integrity().is_ok());
}

TEST(HostTierTest, DemotedEntriesShareHostBlocksAndGiveThemBack) {
  HostBlockPool area(3);
  HostTier tier(area, kBs, 100, 4);
  EXPECT_EQ(tier.capacity(), 12u);  // 3 host blocks x 4 entries
  for (uint64_t k = 1; k <= 5; ++k) ASSERT_TRUE(tier.insert(meta_of(k), tokens_of(k)));
  EXPECT_EQ(tier.host_blocks_held(), 2u);
  EXPECT_EQ(area.num_used(), 2u);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(tier.evict_lru());  // keys 1..4 leave
  EXPECT_EQ(tier.host_blocks_held(), 1u);                     // the first host block went back
  EXPECT_EQ(area.num_used(), 1u);
  EXPECT_TRUE(tier.find(meta_of(5), tokens_of(5)));
  EXPECT_TRUE(tier.check_integrity().is_ok()) << tier.check_integrity().to_string();
}

TEST(HostTierTest, APinnedEntryIsNeverEvictedUntilUnpinned) {
  HostBlockPool area(8);
  HostTier tier(area, kBs, 2);
  const auto s1 = tier.insert(meta_of(1), tokens_of(1));
  const auto s2 = tier.insert(meta_of(2), tokens_of(2));
  ASSERT_TRUE(s1 && s2);
  tier.pin(*s1);  // a load of this step will read slot s1: LRU, but it must stay
  auto e = tier.evict_lru();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->meta.key, 2u);
  // Its slot is the one a new entry takes, never s1.
  const auto s3 = tier.insert(meta_of(3), tokens_of(3));
  ASSERT_TRUE(s3);
  EXPECT_NE(*s3, *s1);
  tier.pin(*s3);
  EXPECT_FALSE(tier.evict_lru());  // everything is pinned: the caller gets no room
  EXPECT_TRUE(tier.check_integrity().is_ok());
  tier.unpin_all();
  e = tier.evict_lru();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->meta.key, 1u);
  EXPECT_TRUE(tier.check_integrity().is_ok());
}

TEST(HostTierTest, RandomizedAgainstAModel) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 20; ++round) {
    const uint32_t capacity = 1 + rng() % 12;
    const uint32_t per_block = 1 + round % 3;  // 2 and 3: demoted entries share host blocks
    HostBlockPool area(capacity + rng() % 4);
    HostTier tier(area, kBs, capacity, per_block);
    std::list<uint64_t> model;  // front = least recently used
    std::set<uint64_t> pinned;  // keys pinned this "step"
    const auto model_lru_unpinned = [&]() -> std::optional<uint64_t> {
      for (uint64_t k : model)
        if (!pinned.contains(k)) return k;
      return std::nullopt;
    };
    std::vector<std::vector<uint32_t>> swapped;
    for (int op = 0; op < 2000; ++op) {
      const uint64_t key = 1 + rng() % 24;
      switch (rng() % 7) {
        case 0:
        case 1: {  // store (evicting LRU entries while there is no room)
          if (tier.contains(key)) break;
          auto slot = tier.insert(meta_of(key), tokens_of(key));
          while (!slot) {
            auto e = tier.evict_lru();
            const std::optional<uint64_t> want = model_lru_unpinned();
            ASSERT_EQ(e.has_value(), want.has_value());
            if (!e) break;
            ASSERT_EQ(e->meta.key, *want);
            model.remove(*want);
            slot = tier.insert(meta_of(key), tokens_of(key));
          }
          if (slot) model.push_back(key);
          break;
        }
        case 2: {  // lookup
          const auto slot = tier.find(meta_of(key), tokens_of(key));
          const auto it = std::find(model.begin(), model.end(), key);
          ASSERT_EQ(slot.has_value(), it != model.end());
          if (slot) {
            tier.touch(*slot);
            model.erase(it);
            model.push_back(key);
          }
          break;
        }
        case 3: {  // swap takes or gives back host blocks
          if (!swapped.empty() && rng() % 2) {
            area.free(swapped.back());
            swapped.pop_back();
          } else if (auto got = area.allocate(1 + rng() % 2)) {
            swapped.push_back(*got);
          }
          break;
        }
        case 4: {  // drop one entry
          const auto slot = tier.find(meta_of(key), tokens_of(key));
          if (slot && !pinned.contains(key)) {
            tier.erase(*slot);
            model.remove(key);
          }
          break;
        }
        case 5: {  // a load found it: pinned for the rest of the step
          const auto slot = tier.find(meta_of(key), tokens_of(key));
          if (slot) {
            tier.pin(*slot);
            pinned.insert(key);
          }
          break;
        }
        case 6:  // the step's transfers ran
          if (rng() % 3 == 0) {
            tier.unpin_all();
            pinned.clear();
          }
          break;
      }
      ASSERT_EQ(tier.size(), model.size());
      ASSERT_TRUE(tier.check_integrity().is_ok()) << tier.check_integrity().to_string();
      ASSERT_TRUE(area.check_integrity().is_ok());
    }
    std::vector<uint64_t> mru;
    tier.for_each_mru([&](uint32_t s) { mru.push_back(tier.meta(s).key); });
    EXPECT_EQ(mru, std::vector<uint64_t>(model.rbegin(), model.rend()));
  }
}

}  // namespace
}  // namespace kvs
