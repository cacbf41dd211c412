#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
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

// Jobs of changing sizes back to back, with more threads than cores and busy neighbours, so
// workers routinely wake late holding an old generation. The soak test hung the server on
// exactly that: a late worker read the next job's chunk count, claimed a chunk with its old
// generation, ran it and counted it, so the caller waited forever for a count it had passed.
// Every chunk must run exactly once and every call must return.
TEST(ThreadPoolTest, LateWorkersNeverClaimANewerJob) {
  std::atomic<bool> stop{false};
  std::vector<std::thread> neighbours;
  for (int i = 0; i < 2; ++i)
    neighbours.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) std::this_thread::yield();
    });
  ThreadPool pool(4);
  for (int r = 0; r < 60000; ++r) {
    const size_t n = r % 3 == 0 ? 2 : r % 3 == 1 ? 48 : 5;
    std::vector<std::atomic<int>> hits(n);
    pool.parallel_for(n, 1, [&](size_t b, size_t e, int) {
      for (size_t i = b; i < e; ++i) hits[i].fetch_add(1, std::memory_order_relaxed);
    });
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "region " << r;
  }
  stop = true;
  for (auto& t : neighbours) t.join();
}

}  // namespace
}  // namespace kvs
