#include "core/thread_pool.h"

#include <algorithm>

#include "core/check.h"

namespace kvs {

ThreadPool::ThreadPool(int threads) : num_threads_(std::max(1, threads)) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

int ThreadPool::hardware_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

void ThreadPool::run_share(int index) {
  // Static split: thread i takes the i-th of num_threads_ near-equal grain-aligned ranges.
  const size_t chunks = (job_n_ + job_grain_ - 1) / job_grain_;
  const size_t per = chunks / num_threads_;
  const size_t extra = chunks % num_threads_;
  const size_t first = index * per + std::min<size_t>(index, extra);
  const size_t count = per + (static_cast<size_t>(index) < extra ? 1 : 0);
  if (count == 0) return;
  const size_t begin = first * job_grain_;
  const size_t end = std::min(job_n_, (first + count) * job_grain_);
  if (begin < end) (*job_)(begin, end, index);
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    // Spin a little: the next region usually follows within microseconds.
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < 20000; ++spin) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return generation_.load() != seen; });
      gen = generation_.load();
    }
    seen = gen;
    if (stop_.load()) return;
    run_share(index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::parallel_for(size_t n, size_t grain,
                              const std::function<void(size_t, size_t, int)>& fn) {
  if (n == 0) return;
  grain = std::max<size_t>(1, grain);
  if (num_threads_ == 1 || n <= grain) {
    fn(0, n, 0);
    return;
  }
  KVS_CHECK_MSG(pending_.load() == 0, "ThreadPool::parallel_for is not reentrant");
  job_ = &fn;
  job_n_ = n;
  job_grain_ = grain;
  pending_.store(num_threads_ - 1, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  cv_.notify_all();
  run_share(0);
  while (pending_.load(std::memory_order_acquire) != 0) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
  job_ = nullptr;
}

}  // namespace kvs
