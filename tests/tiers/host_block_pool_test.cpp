// HostBlockPool: exact ids, all-or-nothing allocation, and a randomized run against a set of
// taken ids with the integrity check after every operation.
#include "tiers/host_block_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

namespace kvs {
namespace {

TEST(HostBlockPoolTest, HandsOutBlocksAndTakesThemBack) {
  HostBlockPool p(4);
  auto a = p.allocate(3);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(*a, (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(p.num_used(), 3u);
  EXPECT_FALSE(p.allocate(2).has_value());  // all or nothing
  EXPECT_EQ(p.num_free(), 1u);
  p.free(*a);
  EXPECT_EQ(p.num_free(), 4u);
  EXPECT_TRUE(p.check_integrity().is_ok());
  EXPECT_FALSE(HostBlockPool(0).allocate(1).has_value());
  EXPECT_TRUE(HostBlockPool(0).allocate(0).has_value());
}

TEST(HostBlockPoolTest, RandomizedAgainstASet) {
  std::mt19937 rng(7);
  HostBlockPool p(64);
  std::set<uint32_t> taken;
  std::vector<std::vector<uint32_t>> held;
  for (int op = 0; op < 20000; ++op) {
    if (held.empty() || rng() % 2 == 0) {
      const uint32_t n = rng() % 9;
      auto got = p.allocate(n);
      ASSERT_EQ(got.has_value(), n <= 64 - taken.size());
      if (got) {
        ASSERT_EQ(got->size(), n);
        for (uint32_t b : *got) ASSERT_TRUE(taken.insert(b).second) << "block handed out twice";
        held.push_back(*got);
      }
    } else {
      const size_t i = rng() % held.size();
      p.free(held[i]);
      for (uint32_t b : held[i]) taken.erase(b);
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
    }
    ASSERT_EQ(p.num_used(), taken.size());
    ASSERT_TRUE(p.check_integrity().is_ok());
  }
}

}  // namespace
}  // namespace kvs
