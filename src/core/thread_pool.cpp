#include "core/thread_pool.h"

#include <algorithm>

#include "core/check.h"

namespace kvs {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

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

void ThreadPool::run_chunks(uint32_t gen, int index) {
  for (;;) {
    uint64_t c = claim_.load(std::memory_order_acquire);
    for (;;) {
      if (static_cast<uint32_t>(c >> 32) != gen) return;
      const uint64_t limit = limit_.load(std::memory_order_acquire);
      if (static_cast<uint32_t>(limit >> 32) != gen ||
          static_cast<uint32_t>(c) >= static_cast<uint32_t>(limit))
        return;
      if (claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel)) break;
    }
    // A chunk of job `gen` is ours and unfinished, so its fields are stable until we count it.
    const auto* fn = job_.load(std::memory_order_acquire);
    const size_t n = job_n_.load(std::memory_order_relaxed);
    const size_t grain = job_grain_.load(std::memory_order_relaxed);
    const size_t begin = static_cast<uint32_t>(c) * grain;
    (*fn)(begin, std::min(n, begin + grain), index);
    chunks_done_.fetch_add(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::worker_loop(int index) {
  uint32_t seen = 0;
  for (;;) {
    uint32_t gen = generation_.load(std::memory_order_acquire);
    // Spin a little (the next region usually follows within microseconds), then yield, then
    // sleep.
    for (int spin = 0; gen == seen && spin < 4000; ++spin) {
      cpu_relax();
      gen = generation_.load(std::memory_order_acquire);
    }
    for (int y = 0; gen == seen && y < 50; ++y) {
      std::this_thread::yield();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      sleeping_.fetch_add(1);
      cv_.wait(lock, [&] { return generation_.load() != seen; });
      sleeping_.fetch_sub(1);
      gen = generation_.load();
    }
    seen = gen;
    if (stop_.load()) return;
    run_chunks(gen, index);
  }
}

void ThreadPool::parallel_for(size_t n, size_t grain,
                              const std::function<void(size_t, size_t, int)>& fn) {
  if (n == 0) return;
  grain = std::max<size_t>(1, grain);
  const size_t chunks = (n + grain - 1) / grain;
  if (num_threads_ == 1 || chunks == 1) {
    for (size_t b = 0; b < n; b += grain) fn(b, std::min(n, b + grain), 0);
    return;
  }
  KVS_CHECK_MSG(chunks < (size_t{1} << 32), "parallel_for: too many chunks");
  ++regions_;
  const uint32_t gen = generation_.load(std::memory_order_relaxed) + 1;
  job_.store(&fn, std::memory_order_relaxed);
  job_n_.store(n, std::memory_order_relaxed);
  job_grain_.store(grain, std::memory_order_relaxed);
  chunks_done_.store(0, std::memory_order_relaxed);
  limit_.store((uint64_t{gen} << 32) | chunks, std::memory_order_release);
  claim_.store(uint64_t{gen} << 32, std::memory_order_release);
  // seq_cst store/load pair with the worker's sleeping_++ / predicate check: one of the two
  // sides always sees the other, so no wake-up is lost.
  generation_.store(gen);
  if (sleeping_.load() > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
  run_chunks(gen, 0);
  for (int spin = 0; chunks_done_.load(std::memory_order_acquire) != chunks; ++spin) {
    if (spin < 2000)
      cpu_relax();
    else
      std::this_thread::yield();
  }
}

}  // namespace kvs
