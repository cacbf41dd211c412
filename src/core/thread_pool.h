// ThreadPool: a fixed set of workers that run one parallel_for at a time. Work is split into
// contiguous ranges (rows of a matmul, heads of attention); the calling thread takes part.
// Workers spin briefly before sleeping, because an engine step issues hundreds of short
// parallel regions and a futex wake per region would dominate small-model decode.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvs {

class ThreadPool {
 public:
  // threads >= 1 (the caller counts as one of them).
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  [[nodiscard]] int num_threads() const { return num_threads_; }

  // Calls fn(begin, end, thread_index) over disjoint ranges that cover [0, n), each range a
  // multiple of `grain` (except the last). Returns when every range has run. Not reentrant.
  void parallel_for(size_t n, size_t grain, const std::function<void(size_t, size_t, int)>& fn);

  // Number of hardware threads (at least 1).
  static int hardware_threads();

 private:
  void worker_loop(int index);
  void run_share(int index);

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  // The current job (valid while pending_ > 0).
  const std::function<void(size_t, size_t, int)>* job_ = nullptr;
  size_t job_n_ = 0;
  size_t job_grain_ = 1;
};

}  // namespace kvs
