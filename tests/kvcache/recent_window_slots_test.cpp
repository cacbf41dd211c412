// RecentWindowSlots (kvcache/recent_window_slots.h) against a simple model under random takes,
// forks and releases (and the hand-overs it records); and the cache manager's use of it (admit,
// fork, free, restore).
#include "kvcache/recent_window_slots.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <vector>

#include "kvcache/kv_cache_manager.h"

namespace kvs {
namespace {

TEST(RecentWindowSlotsTest, RandomAgainstModel) {
  std::mt19937 rng(3);
  RecentWindowSlots slots(5);
  std::map<uint64_t, uint32_t> held;  // the model: sequence -> slot
  std::vector<RecentSlotChange> changes;
  uint64_t next = 1;
  for (int op = 0; op < 4000; ++op) {
    const int kind = int(rng() % 4);
    if (kind == 0) {  // take
      const SeqId s{next++};
      const auto got = slots.take(s);
      ASSERT_EQ(got.has_value(), held.size() < 5);
      if (got) {
        for (const auto& [seq, slot] : held) ASSERT_NE(slot, *got);
        held[s.value] = *got;
        changes.push_back({.slot = *got});
      }
    } else if (kind == 1 && !held.empty()) {  // fork
      auto it = std::next(held.begin(), long(rng() % held.size()));
      const SeqId child{next++};
      const bool ok = slots.fork(SeqId{it->first}, child);
      ASSERT_EQ(ok, held.size() < 5);
      if (ok) {
        held[child.value] = uint32_t(slots.slot_of(child));
        changes.push_back({.slot = held[child.value], .copy_from = int32_t(it->second)});
      }
    } else if (kind == 2 && !held.empty()) {  // release
      auto it = std::next(held.begin(), long(rng() % held.size()));
      slots.release(SeqId{it->first});
      held.erase(it);
    } else if (kind == 3) {
      ASSERT_EQ(slots.take_changes(), changes);
      changes.clear();
    }
    ASSERT_TRUE(slots.check_integrity());
    ASSERT_EQ(slots.num_free(), 5 - held.size());
    for (const auto& [seq, slot] : held) ASSERT_EQ(slots.slot_of(SeqId{seq}), int32_t(slot));
  }
}

TEST(RecentWindowSlotsTest, CacheManagerGivesEverySequenceOne) {
  KvCacheManager cache({.num_blocks = 64, .block_size = 16, .recent_window_slots = 2});
  const std::vector<int32_t> prompt(40, 7);
  ASSERT_TRUE(cache.admit(SeqId{1}, prompt, "", nullptr, 40).is_ok());
  cache.commit_tokens(SeqId{1}, prompt);
  EXPECT_EQ(cache.recent_slot(SeqId{1}), 0);
  ASSERT_TRUE(cache.fork(SeqId{1}, SeqId{2}).is_ok());
  EXPECT_EQ(cache.recent_slot(SeqId{2}), 1);
  // Slot 0 reset for the new sequence, slot 1 filled with slot 0's rows for the child.
  EXPECT_EQ(cache.take_recent_changes(),
            (std::vector<RecentSlotChange>{{.slot = 0}, {.slot = 1, .copy_from = 0}}));
  // Every slot held: admission, a fork and a restore fail cleanly, changing nothing.
  const auto third = cache.admit(SeqId{3}, prompt, "", nullptr, 40);
  EXPECT_EQ(third.status().code(), StatusCode::kResourceExhausted);
  EXPECT_FALSE(cache.contains(SeqId{3}));
  EXPECT_EQ(cache.fork(SeqId{1}, SeqId{4}).code(), StatusCode::kResourceExhausted);
  EXPECT_FALSE(cache.admit_restored(SeqId{5}, prompt, "", 0).is_ok());
  EXPECT_TRUE(cache.check_integrity().is_ok());
  cache.free(SeqId{1});
  EXPECT_EQ(cache.recent_slot(SeqId{1}), -1);
  ASSERT_TRUE(cache.admit_restored(SeqId{5}, prompt, "", 0).is_ok());
  EXPECT_EQ(cache.recent_slot(SeqId{5}), 0);
  EXPECT_TRUE(cache.check_integrity().is_ok());
}

}  // namespace
}  // namespace kvs
