#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace kvs {
namespace {

TEST(ThreadPoolTest, CoversEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (size_t n : {size_t{1}, size_t{7}, size_t{64}, size_t{1000}}) {
      for (size_t grain : {size_t{1}, size_t{3}, size_t{16}, size_t{5000}}) {
        std::vector<std::atomic<int>> hits(n);
        std::atomic<int> bad_index{0};
        pool.parallel_for(n, grain, [&](size_t b, size_t e, int t) {
          if (t < 0 || t >= threads || e - b > grain || b % grain != 0) bad_index.fetch_add(1);
          for (size_t i = b; i < e; ++i) hits[i].fetch_add(1);
        });
        EXPECT_EQ(bad_index.load(), 0);
        for (size_t i = 0; i < n; ++i)
          ASSERT_EQ(hits[i].load(), 1) << threads << " " << n << " " << grain;
      }
    }
  }
}

TEST(ThreadPoolTest, ManyShortRegionsInARow) {
  ThreadPool pool(4);  // more threads than this machine's cores: claims must still finish
  std::atomic<uint64_t> sum{0};
  for (int r = 0; r < 20000; ++r)
    pool.parallel_for(8, 1, [&](size_t b, size_t e, int) { sum.fetch_add(e - b); });
  EXPECT_EQ(sum.load(), 20000u * 8);
}

}  // namespace
}  // namespace kvs
