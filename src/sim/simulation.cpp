#include "sim/simulation.h"

#include <algorithm>
#include <chrono>
#include <future>

#include "sim/token_synthesizer.h"

namespace kvs {

KvPoolPlan pool_the_trace_can_use(const KvPoolPlan& pool, const Trace& trace) {
  // Every request at once, each with one spare block per group (a copy-on-write of a shared
  // partial block), and nothing ever evicted: the most blocks the trace can hold.
  const uint64_t groups = std::max<uint64_t>(1, pool.groups.num_groups());
  uint64_t demand = 0;
  for (const TraceRequest& r : trace.requests) {
    const uint64_t tokens = uint64_t{r.input_tokens} + r.output_tokens;
    demand += groups * ((tokens + pool.block_size - 1) / pool.block_size + 1);
    if (demand >= pool.num_blocks) return pool;
  }
  KvPoolPlan capped = pool;
  capped.num_blocks = static_cast<uint32_t>(demand);
  capped.pool_bytes = demand * pool.block_bytes;
  capped.num_tokens = demand / groups * pool.block_size;
  return capped;
}

Result<SimResult> run_simulation(const SimSetup& setup, const Trace& input, StepLog* step_log) {
  if (step_log != nullptr && setup.replicas != 1)
    return invalid_argument(
        "--step-log logs one engine: it needs a single replica (--gpus = --tp)");
  const auto t0 = std::chrono::steady_clock::now();
  Trace scaled;
  const Trace* trace = &input;
  if (setup.args.rate_scale != 1 || setup.args.arrival_jitter_ms > 0) {
    scaled = input;
    KVS_RETURN_IF_ERROR(scale_trace_rate(scaled, setup.args.rate_scale));
    KVS_RETURN_IF_ERROR(
        jitter_trace_arrivals(scaled, setup.args.arrival_jitter_ms / 1000, setup.args.seed));
    trace = &scaled;
  }
  KVS_RETURN_IF_ERROR(validate_trace(*trace));
  SimResult out;
  out.trace = trace_stats(*trace);
  out.trace_source = trace->source;
  const TokenSynthesizer tokens(*trace, setup.vocab_size);
  out.first_token_wraps = tokens.first_token_wraps();

  ReplicaConfig rc;
  const KvPoolPlan pool = pool_the_trace_can_use(setup.pool, *trace);
  out.simulated_blocks = pool.num_blocks;
  // The engine's own wiring of its pool into a cache (hash seed 0: deterministic runs; there is
  // no one outside to guard against).
  rc.driver = StepDriverConfig{.pool = pool,
                               .cache = pool_cache_config(pool, setup.enable_prefix_caching, 0, 0),
                               .scheduler = setup.scheduler,
                               .host_blocks = setup.host_blocks,
                               .max_model_len = setup.max_model_len};
  rc.block_bytes = setup.pool.block_bytes;
  rc.device = setup.device;
  rc.cost = setup.cost;
  rc.step_log = step_log;

  std::vector<std::vector<uint32_t>> assigned(setup.replicas);
  for (uint32_t i = 0; i < trace->requests.size(); ++i) assigned[i % setup.replicas].push_back(i);
  std::vector<std::future<ReplicaResult>> running;
  for (uint32_t r = 0; r < setup.replicas; ++r)
    running.push_back(std::async(
        std::launch::async, [&, r] { return run_replica(rc, *trace, tokens, assigned[r], r); }));
  for (auto& f : running) out.replicas.push_back(f.get());
  out.summary = summarize(out.replicas, setup.pool.num_blocks);

  const uint32_t bs = setup.pool.block_size;
  double blocks = 0;
  uint64_t longest = 0;
  for (const TraceRequest& r : trace->requests) {
    const uint64_t tokens_needed = uint64_t{r.input_tokens} + r.output_tokens;
    blocks += static_cast<double>((tokens_needed + bs - 1) / bs);
    longest = std::max(longest, (tokens_needed + bs - 1) / bs);
  }
  if (!trace->requests.empty()) {
    blocks /= static_cast<double>(trace->requests.size());
    out.static_concurrency_mean = setup.pool.num_blocks / blocks;
    out.static_concurrency_longest =
        static_cast<double>(setup.pool.num_blocks) / static_cast<double>(longest);
  }
  out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace kvs
