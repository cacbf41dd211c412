// sim_metrics: what a simulation measured, from its replicas' request records and step samples:
// latency percentiles (TTFT, TPOT, end to end), throughput, prefix-cache hit rate in tokens,
// preemptions by mode, concurrency and KV occupancy over time.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sim/sim_replica.h"

namespace kvs {

struct Percentiles {
  uint64_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
};
// Linear interpolation between closest ranks (numpy's default); all zero when empty.
[[nodiscard]] Percentiles percentiles(std::vector<double> values);

// One point of the time series: averages over [start_s, end_s) summed over replicas (running,
// waiting) or averaged (KV fractions); preemptions counted in the interval (by the step that
// started in it), by mode.
struct SeriesPoint {
  double start_s = 0, end_s = 0;
  double running = 0, waiting = 0;
  double kv_in_use = 0;       // fraction of the pool's blocks referenced by sequences
  double kv_cached_free = 0;  // fraction kept only as prefix cache (reusable, evictable)
  uint64_t preempted_recompute = 0, preempted_swap = 0;
};

struct SimSummary {
  uint64_t requests = 0, completed = 0, rejected = 0;
  uint32_t replicas = 1;
  double makespan_s = 0;                         // first arrival to last finish
  uint64_t input_tokens = 0, output_tokens = 0;  // of completed requests
  double requests_per_s = 0, input_tokens_per_s = 0, output_tokens_per_s = 0;
  Percentiles ttft_s, tpot_s, e2e_s;
  // Prefix cache, the engine's counters (as /metrics reports them): prompt tokens looked up at
  // every admission (re-admissions after a recompute preemption included) and, of those, tokens
  // served from whole cached blocks; partial-block copies are counted separately.
  uint64_t prefix_query_tokens = 0, prefix_hit_tokens = 0, prefix_partial_tokens = 0;
  double prefix_cache_hit_rate = 0;  // prefix_hit_tokens / prefix_query_tokens (0..1)
  uint64_t prompt_tokens_computed = 0;
  uint64_t evictions = 0;
  uint64_t preemptions_recompute = 0, preemptions_swap = 0;
  uint64_t requests_preempted = 0;
  // Concurrency: time-weighted means over the makespan, summed over replicas; maxima per replica.
  double running_mean = 0, waiting_mean = 0;
  uint32_t running_max = 0, waiting_max = 0;
  double kv_in_use_mean = 0, kv_in_use_max = 0;  // fraction of blocks, mean over replicas
  uint64_t steps = 0;
  double busy_fraction = 0;           // time in steps / (makespan x replicas)
  double compute_bound_fraction = 0;  // of the busy time, steps where compute > memory
};

[[nodiscard]] SimSummary summarize(std::span<const ReplicaResult> replicas, uint32_t num_blocks);

// `buckets` equal intervals over [0, makespan].
[[nodiscard]] std::vector<SeriesPoint> time_series(std::span<const ReplicaResult> replicas,
                                                   uint32_t num_blocks, double makespan_s,
                                                   size_t buckets);

}  // namespace kvs
