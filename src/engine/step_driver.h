// StepDriver: THE step of kvserve, used by the engine (over the model), by the simulator (over
// the step-time model) and by tests (over a stand-in), so that there is one copy of it:
//
//   1. schedule   the scheduler decides (chunks, admissions, preemptions) and queues transfers;
//   2. transfer   the backend moves block bytes in that order (the simulator moves none);
//   3. forward    the backend runs the chunks (the model, or a modelled step time);
//   4. commit     the chunks' tokens enter the cache; a chunk that reaches its sequence's end
//                 samples a token (forking the other samples of n > 1 first) or scores its
//                 prompt positions; a sequence ends by EOS, length, or the stop hook (stop
//                 strings), all here; the blocks the step completed go down to write-through
//                 tiers and Redis (a second, small transfer);
//   5. report     the step's observer (step log, simulator samples) sees what the step did.
//
// It owns the cache manager, the host area, the scheduler and the sequences, and checks every
// request the same way for every backend (add()): so the engine and the simulator admit, reject
// and schedule alike, sliding-window models included.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/step_log.h"
#include "kvcache/kv_cache_manager.h"
#include "kvcache/kv_pool_plan.h"
#include "tiers/host_block_pool.h"

namespace kvs {

// What runs a step for the driver. Per step the driver calls transfer() with the plan's moves,
// transfers_done(), forward(), then sample() once per sequence whose chunk reached its end (each
// forked sample too) or score() for a scored prompt, and transfer() again with the write-down of
// the blocks the step completed (often empty).
class StepBackend {
 public:
  virtual ~StepBackend() = default;
  // Seconds on the backend's clock: wall time, or the simulation's virtual time.
  [[nodiscard]] virtual double now() = 0;
  virtual void transfer(const KvTransferPlan& plan) = 0;
  virtual void transfers_done() {}
  // Nothing could run while `loading` sequences wait for tier reads: wait for one a little.
  virtual void idle(size_t loading) { (void)loading; }
  // The forward pass of the plan's chunks (their slots are appended, their earlier KV in place,
  // sequences' num_computed not yet advanced).
  virtual void forward(const StepPlan& plan) = 0;
  // The next token of chunk `chunk`'s sequence `s` (for a forked sample, the parent's chunk).
  virtual int32_t sample(size_t chunk, Sequence& s) = 0;
  // Scores positions [first, first + count) of chunk `chunk`'s scored prompt.
  virtual void score(size_t chunk, Sequence& s, uint32_t first, uint32_t count);
};

struct StepDriverConfig {
  KvPoolPlan pool;  // blocks, block size, layer groups (the footprint check uses it)
  KvCacheConfig cache;
  SchedulerConfig scheduler;
  uint32_t host_blocks = 0;      // the host area: swap's share and the host tier's
  uint32_t max_model_len = 0;    // prompt + max_tokens, at most
  uint32_t vocab_size = 0;       // prompt token ids must be below it (0: unchecked)
  std::vector<int32_t> eog_ids;  // tokens that end generation
};

// The cache manager's configuration for a planned pool: what the engine and the simulator both
// build their caches from.
[[nodiscard]] KvCacheConfig pool_cache_config(const KvPoolPlan& pool, bool enable_prefix_caching,
                                              uint64_t model_fingerprint, uint64_t hash_seed);

// The host area's share for swap, in pool blocks: in swap mode as many whole blocks of
// `block_bytes` as `swap_space` holds (at most kMaxPoolBlocks), none in recompute mode. Swap mode
// with room for no block is refused (it would quietly recompute every victim): the engine
// (--swap-space of serve) and the simulator size swap with this one rule.
[[nodiscard]] Result<uint32_t> swap_host_blocks(PreemptionMode mode, uint64_t swap_space,
                                                uint64_t block_bytes);

// One sampled token, with what a server needs to know of its request.
struct StepOutput {
  SeqId seq{0};
  SeqId request{0};    // the request's first sequence (Sequence::parent, or seq itself)
  uint32_t index = 0;  // sample index within the request
  int32_t token = 0;
  uint32_t generated = 0;  // tokens the sample has generated, this one included
  bool finished = false;
  FinishReason finish = FinishReason::kNone;
  // Prompt tokens reused from the prefix cache at the first admission, in whole blocks (a
  // partial-block match length is never reported: it would tell another request's exact
  // shared length).
  uint32_t cached_tokens = 0;
  // The token's logprobs, when its request asked for them (SamplingParams::logprobs).
  std::optional<SampledLogprobs> logprobs;
};

struct StepCounters {
  uint64_t steps = 0;
  uint64_t prompt_tokens_computed = 0;  // prefill tokens actually run (cache hits excluded)
  uint64_t generated_tokens = 0;
  double forward_seconds = 0;
  // Steps that ran any prompt token count as prefill steps; the rest are decode steps.
  double prefill_step_seconds = 0;
  double decode_step_seconds = 0;
  uint64_t decode_step_tokens = 0;  // tokens generated in decode steps
  uint32_t peak_blocks_in_use = 0;
};

class StepDriver {
 public:
  explicit StepDriver(const StepDriverConfig& config);

  // Checks and queues a sequence: non-empty prompt of in-vocabulary ids, prompt + max_tokens
  // within max_model_len and within the whole pool (its footprint when it runs alone), valid
  // sampling parameters, 1 <= n <= kMaxSamplesPerRequest; max_tokens >= 1 unless the prompt is
  // scored (score_from), which needs max_tokens == 0 and n == 1. With n > 1 the returned id is
  // sample 0; samples 1..n-1 are forked once the prompt is prefilled.
  Result<SeqId> add(SequenceRequest request);
  // Runs one step; returns the token each advancing sequence produced.
  std::vector<StepOutput> step(StepBackend& backend);
  [[nodiscard]] bool has_unfinished() const { return !scheduler_.empty(); }
  [[nodiscard]] const Sequence& sequence(SeqId id) const;
  // Stops a sequence (finished with kAbort) and frees its blocks.
  void abort(SeqId id);
  // Forgets a finished sequence.
  void release(SeqId id);

  // Called for every sampled token before the driver decides whether the sequence ends: true
  // ends it with FinishReason::kStop (a stop string). Null: none.
  void set_stop_hook(std::function<bool(const Sequence&, int32_t token)> hook) {
    stop_hook_ = std::move(hook);
  }
  // Called after every step that ran (step logs, simulator samples). Null: none.
  void set_step_observer(std::function<void(const StepLogEntry&)> observer) {
    observer_ = std::move(observer);
  }

  [[nodiscard]] const StepDriverConfig& config() const { return config_; }
  [[nodiscard]] const StepCounters& counters() const { return counters_; }
  [[nodiscard]] KvCacheManager& cache() { return cache_; }
  [[nodiscard]] const KvCacheManager& cache() const { return cache_; }
  [[nodiscard]] HostBlockPool& host_area() { return host_; }
  [[nodiscard]] const HostBlockPool& host_area() const { return host_; }
  [[nodiscard]] Scheduler& scheduler() { return scheduler_; }
  [[nodiscard]] const Scheduler& scheduler() const { return scheduler_; }
  // Calls fn for every sequence the driver holds (any status), in no particular order.
  template <typename Fn>
  void for_each_sequence(Fn&& fn) const {
    for (const auto& [id, s] : seqs_) fn(*s);
  }

 private:
  void finish(Sequence& s, FinishReason reason);
  void fork_children(Sequence& parent);
  void sample_into(size_t chunk, Sequence& s, bool has_prefill, StepBackend& backend,
                   std::vector<StepOutput>* out);

  StepDriverConfig config_;
  KvCacheManager cache_;
  HostBlockPool host_;
  Scheduler scheduler_;
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, std::unique_ptr<Sequence>> seqs_;
  std::vector<Sequence*> forked_;
  StepCounters counters_;
  std::function<bool(const Sequence&, int32_t)> stop_hook_;
  std::function<void(const StepLogEntry&)> observer_;
};

}  // namespace kvs
