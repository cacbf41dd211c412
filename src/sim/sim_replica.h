// sim_replica: one engine replica of `kvserve simulate`, stepped through virtual time. It runs
// the engine's own step (StepDriver: the same scheduler, cache manager, admission checks and
// commit as Engine::step, so the two cannot drift apart) over a backend that moves no bytes and
// runs no model: the step-time model advances the clock, and a chunk that reaches its
// sequence's end samples the synthesizer's output token. A sequence finishes at the trace's
// output length and gives its blocks back.
//
// Requests arrive at their trace time; one that can never run (prompt + output beyond the
// maximum model length, or a footprint larger than the whole pool) is rejected, by the same
// check that makes Engine::add_request refuse it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/scheduler.h"
#include "engine/step_driver.h"
#include "engine/step_log.h"
#include "kvcache/kv_cache_manager.h"
#include "sim/step_time_model.h"
#include "sim/token_synthesizer.h"
#include "sim/trace.h"

namespace kvs {

struct ReplicaConfig {
  StepDriverConfig driver;   // the pool, cache, scheduler, swap area and length limit
  uint64_t block_bytes = 0;  // one block on one rank
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
