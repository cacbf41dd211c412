// sim_replica: one engine replica of `kvserve simulate`, stepped through virtual time. It runs the
// engine's own Scheduler and KvCacheManager (no weights, no kernels): each step the scheduler
// plans (admissions, chunks, preemptions, transfers) exactly as it does when serving; instead of
// the transfers and the forward pass the step-time model advances the clock; then the step is
// committed as Engine::step commits it (the chunk's tokens into the cache; a chunk that reaches
// its sequence's end samples the next token, here the synthesizer's output token; a sequence
// finishes at the trace's output length and gives its blocks back).
//
// Requests arrive at their trace time; one that cannot ever run (prompt + output beyond the
// maximum model length or the whole pool) is rejected, as Engine::add_request rejects it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/scheduler.h"
#include "engine/step_log.h"
#include "kvcache/kv_cache_manager.h"
#include "sim/step_time_model.h"
#include "sim/token_synthesizer.h"
#include "sim/trace.h"

namespace kvs {

struct ReplicaConfig {
  KvCacheConfig cache;  // num_blocks, block_size, prefix caching, formats, hash seed
  SchedulerConfig scheduler;
  uint32_t host_blocks = 0;    // swap area (swap preemption), in blocks
  uint32_t max_model_len = 0;  // prompt + output, at most
  uint64_t block_bytes = 0;    // one block on one rank
  DeviceModel device;
  ModelCost cost;
  StepLog* step_log = nullptr;  // a line per step (not owned; null = none)
};

struct RequestRecord {
  uint32_t trace_index = 0;
  uint32_t replica = 0;
  double arrival_s = 0;
  double first_token_s = -1;  // < 0: no token yet
  double finish_s = -1;       // < 0: not finished (or rejected)
  uint32_t input_tokens = 0;
  uint32_t output_tokens = 0;
  uint32_t cached_tokens = 0;  // prefix-cache hits at its first admission
  uint32_t preemptions = 0;
  bool rejected = false;
  [[nodiscard]] bool completed() const { return finish_s >= 0; }
};

// One step, or an idle gap (tokens == 0) between steps.
struct StepSample {
  double start_s = 0;
  double end_s = 0;
  uint32_t running = 0;  // after scheduling
  uint32_t waiting = 0;
  uint32_t blocks_in_use = 0;  // after the step
  uint32_t blocks_cached_free = 0;
  uint32_t tokens = 0;
  uint32_t preempted_recompute = 0;  // preemptions this step, by mode
  uint32_t preempted_swap = 0;
  bool compute_bound = false;
};

struct ReplicaResult {
  uint32_t replica = 0;
  std::vector<RequestRecord> records;  // in arrival order
  std::vector<StepSample> steps;
  KvCacheCounters cache;
  uint64_t preemptions_recompute = 0;
  uint64_t preemptions_swap = 0;
  uint64_t prompt_tokens_computed = 0;  // prefill tokens run (hits excluded, recomputes included)
  uint64_t num_steps = 0;
  double busy_s = 0;  // time in steps
  uint32_t peak_blocks_in_use = 0;
};

// Replays trace.requests[i] for every i in `indices` (ascending) on one replica.
[[nodiscard]] ReplicaResult run_replica(const ReplicaConfig& config, const Trace& trace,
                                        const TokenSynthesizer& tokens,
                                        std::span<const uint32_t> indices, uint32_t replica);

}  // namespace kvs
