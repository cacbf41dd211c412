// Scheduler: decides which sequences advance in the next step and by how many tokens.
// Continuous batching under a token budget: running decodes first (one token each), then
// prefill chunks (chunked prefill, so a long prompt cannot stall running streams), then
// admission of waiting sequences in FCFS order, each admission asking the cache manager's dry
// run whether its blocks fit (cached prefix blocks cost nothing).
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "engine/sequence.h"
#include "kvcache/kv_cache_manager.h"

namespace kvs {

struct SchedulerConfig {
  uint32_t max_num_batched_tokens = 512;
  uint32_t max_num_seqs = 64;
};

struct ScheduledChunk {
  Sequence* seq;
  uint32_t num_tokens;  // tokens of seq computed this step, starting at seq->num_computed
};

class Scheduler {
 public:
  explicit Scheduler(const SchedulerConfig& config) : config_(config) {}

  void add(Sequence* seq) { waiting_.push_back(seq); }
  void remove_finished();
  [[nodiscard]] bool empty() const { return waiting_.empty() && running_.empty(); }
  [[nodiscard]] size_t num_waiting() const { return waiting_.size(); }
  [[nodiscard]] size_t num_running() const { return running_.size(); }

  // Plans the next step. Admits waiting sequences into the cache (manager.admit) and reserves
  // the slots of every scheduled chunk (manager.append_slots), collecting block copies the
  // runner must perform first. When a running sequence needs a block and none is free, the
  // newest running sequence not yet scheduled this step is preempted (recompute).
  std::vector<ScheduledChunk> schedule(KvCacheManager& cache, std::vector<BlockCopy>* copies);
  [[nodiscard]] uint64_t num_preemptions() const { return num_preemptions_; }

 private:
  void preempt(KvCacheManager& cache, Sequence* victim);

  SchedulerConfig config_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;
  uint64_t num_preemptions_ = 0;
};

}  // namespace kvs
