// simulation: one `kvserve simulate` run. Scales the trace's rate, synthesizes its tokens once
// (token_synthesizer.h), assigns requests to the setup's replicas round robin in arrival order,
// runs every replica (independent, so on threads) and summarizes them.
#pragma once

#include <string>
#include <vector>

#include "sim/sim_metrics.h"
#include "sim/sim_replica.h"
#include "sim/sim_request.h"
#include "sim/trace.h"

namespace kvs {

struct SimResult {
  std::vector<ReplicaResult> replicas;
  SimSummary summary;
  TraceStats trace;  // of the replayed (scaled, truncated) trace
  std::string trace_source;
  // What the static plan would say for this pool: requests that fit when every request is at the
  // trace's mean length (prompt + output, whole blocks), and when every one is at the longest.
  double static_concurrency_mean = 0;
  double static_concurrency_longest = 0;
  uint64_t first_token_wraps = 0;  // TokenSynthesizer::first_token_wraps (0 = exact sharing)
  double wall_s = 0;               // time the simulation took on this machine
  // Blocks the simulated engine tracked: the pool's, or fewer when the whole trace needs fewer
  // (pool_the_trace_can_use).
  uint32_t simulated_blocks = 0;
};

// The pool the simulated engine runs: `pool` itself, or, when every request of `trace` held at
// once (plus a spare block each per layer group) takes fewer blocks, a pool of just that many.
// The two give the same run — free blocks are allocated before cached ones, so a pool that never
// fills never evicts, never preempts and never refuses — while a what-if of 100 TB keeps the
// bookkeeping of the blocks the trace can reach (it took 9 GB of RAM and 40 s before). Reports
// still show `pool`.
[[nodiscard]] KvPoolPlan pool_the_trace_can_use(const KvPoolPlan& pool, const Trace& trace);

// `trace` is replayed as given except for setup.args.rate_scale and arrival_jitter_ms. `step_log`
// (not owned) gets a line per step in virtual time; it needs a single replica.
[[nodiscard]] Result<SimResult> run_simulation(const SimSetup& setup, const Trace& trace,
                                               StepLog* step_log = nullptr);

}  // namespace kvs
