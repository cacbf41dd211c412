// StartTokenTable (kvcache/start_token_table.h): which first tokens the attention sink holds rows
// for. A publication is known only once its step's rows are written, the least recently used
// token is forgotten, and random steps against a simple model.
#include "kvcache/start_token_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <list>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <vector>

namespace kvs {
namespace {

TEST(StartTokenTableTest, APublicationIsKnownOnceItsRowsAreWritten) {
  StartTokenTable t(2);
  EXPECT_FALSE(t.knows(7));
  EXPECT_FALSE(t.knows(-1));  // what marks an empty entry is no token
  const std::optional<uint32_t> e = t.publish(7);
  ASSERT_TRUE(e.has_value());
  EXPECT_FALSE(t.knows(7));               // written after this step's forward pass
  EXPECT_EQ(t.publish(7), std::nullopt);  // another sequence of this step: the same bytes
  EXPECT_TRUE(t.check_integrity());
  t.rows_written();
  EXPECT_TRUE(t.knows(7));
  EXPECT_EQ(t.adopt(7), *e);
  EXPECT_EQ(t.publish(7), std::nullopt);  // known already
  EXPECT_TRUE(t.check_integrity());
}

TEST(StartTokenTableTest, ForgetsTheLeastRecentlyUsedToken) {
  StartTokenTable t(2);
  const uint32_t e10 = *t.publish(10);
  const uint32_t e20 = *t.publish(20);
  EXPECT_NE(e10, e20);
  t.rows_written();
  EXPECT_EQ(t.adopt(10), e10);    // 10 is now the most recently used
  EXPECT_EQ(t.publish(30), e20);  // full: forgets 20 at once
  EXPECT_FALSE(t.knows(20));
  EXPECT_FALSE(t.knows(30));
  EXPECT_EQ(t.tokens_by_use(), (std::vector<int32_t>{10}));
  t.rows_written();
  EXPECT_TRUE(t.knows(30));
  EXPECT_EQ(t.tokens_by_use(), (std::vector<int32_t>{10, 30}));
  EXPECT_TRUE(t.check_integrity());
}

// Entries being written this step are never a publication's victim; an entry adopted this step
// may be (its rows were copied before the forward pass).
TEST(StartTokenTableTest, AStepsPublicationsTakeDistinctEntries) {
  StartTokenTable t(3);
  for (int32_t tok : {1, 2, 3}) (void)t.publish(tok);
  t.rows_written();
  (void)t.adopt(1);
  std::set<uint32_t> entries;
  for (int32_t tok : {4, 5, 6}) entries.insert(*t.publish(tok));
  EXPECT_EQ(entries.size(), 3u);
  EXPECT_TRUE(t.tokens_by_use().empty());
  t.rows_written();
  EXPECT_EQ(t.tokens_by_use(), (std::vector<int32_t>{4, 5, 6}));
  EXPECT_TRUE(t.check_integrity());
}

// Steps of adoptions (of known tokens) and publications (at most one per entry), against a list
// of the tokens in use order (those written this step included) and a map of each one's entry.
TEST(StartTokenTableTest, RandomStepsMatchASimpleModel) {
  constexpr uint32_t kEntries = 4;
  StartTokenTable t(kEntries);
  std::mt19937 rng(5);
  std::list<int32_t> order;              // least recently used first
  std::set<int32_t> pending;             // published this step
  std::map<int32_t, uint32_t> entry_of;  // every listed token's entry
  auto touch = [&](int32_t token) {
    order.remove(token);
    order.push_back(token);
  };
  auto known_by_use = [&] {
    std::vector<int32_t> out;
    for (const int32_t tok : order)
      if (pending.count(tok) == 0) out.push_back(tok);
    return out;
  };
  for (int step = 0; step < 3000; ++step) {
    const uint32_t ops = rng() % (kEntries + 1);
    for (uint32_t i = 0; i < ops; ++i) {
      const auto token = static_cast<int32_t>(rng() % 9);
      const bool listed = entry_of.count(token) != 0;
      const bool known = listed && pending.count(token) == 0;
      ASSERT_EQ(t.knows(token), known) << step;
      if (rng() % 2 == 0) {  // a prefix hit adopts
        if (!known) continue;
        ASSERT_EQ(t.adopt(token), entry_of.at(token)) << step;
        touch(token);
        continue;
      }
      // A sequence computes position 0 (at most kEntries a step: the sink's slots).
      const std::optional<uint32_t> e = t.publish(token);
      if (listed) {
        ASSERT_EQ(e, std::nullopt) << step;
        touch(token);
        continue;
      }
      ASSERT_TRUE(e.has_value()) << step;
      // The victim: an empty entry, else the least recently used written token's.
      if (entry_of.size() == kEntries) {
        const auto victim = std::find_if(order.begin(), order.end(),
                                         [&](int32_t tok) { return pending.count(tok) == 0; });
        ASSERT_NE(victim, order.end()) << step;
        ASSERT_EQ(*e, entry_of.at(*victim)) << step;
        entry_of.erase(*victim);
        order.erase(victim);
      }
      for (const auto& [tok, entry] : entry_of) ASSERT_NE(entry, *e) << step;
      entry_of[token] = *e;
      order.push_back(token);
      pending.insert(token);
    }
    ASSERT_EQ(t.tokens_by_use(), known_by_use()) << step;
    ASSERT_TRUE(t.check_integrity()) << step;
    t.rows_written();
    pending.clear();
    ASSERT_EQ(t.tokens_by_use(), known_by_use()) << step;
  }
}

}  // namespace
}  // namespace kvs
