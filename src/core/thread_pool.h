// ThreadPool: a fixed set of workers that run one parallel_for at a time. Work is split into
// chunks of `grain` items that threads claim from a shared counter, so a worker the OS has
// descheduled (a busy machine) delays nothing: the others, including the caller, take its
// chunks. Workers spin briefly before sleeping, because an engine step issues hundreds of short
// parallel regions and a futex wake per region would dominate small-model decode.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
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

  // Calls fn(begin, end, thread_index) over disjoint ranges that cover [0, n), each range
  // `grain` items (the last may be shorter). Returns when every range has run. Not reentrant.
  // thread_index < num_threads() identifies the calling thread (for per-thread scratch).
  void parallel_for(size_t n, size_t grain, const std::function<void(size_t, size_t, int)>& fn);

  // Parallel regions run so far: parallel_for calls that handed chunks to the workers (one chunk,
  // or one thread, runs on the caller and is not counted). Read by the caller's thread.
  [[nodiscard]] uint64_t regions() const { return regions_; }

  // Number of hardware threads (at least 1).
  static int hardware_threads();

 private:
  void worker_loop(int index);
  // Claims and runs chunks of job `gen` until none is left.
  void run_chunks(uint32_t gen, int index);

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<int> sleeping_{0};
  std::atomic<bool> stop_{false};
  // The current job. claim_ packs (generation << 32 | next chunk) and limit_ (generation << 32
  // | chunks). A chunk is claimed only when both carry the claimer's generation, so a worker
  // that wakes up late (holding an old generation) can never claim, run or count a chunk of a
  // newer job; it reads the job's fields only after a successful claim, when they cannot change
  // (the next job starts after every chunk of this one is done).
  std::atomic<uint64_t> claim_{0};
  std::atomic<uint64_t> limit_{0};
  std::atomic<uint32_t> generation_{0};
  std::atomic<size_t> chunks_done_{0};
  std::atomic<const std::function<void(size_t, size_t, int)>*> job_{nullptr};
  std::atomic<size_t> job_n_{0};
  std::atomic<size_t> job_grain_{1};
  uint64_t regions_ = 0;  // only parallel_for's caller touches it
};

}  // namespace kvs
