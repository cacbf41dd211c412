// `kvserve simulate`: replays a request trace through the engine's own scheduler and KV cache
// manager in virtual time, with a roofline step-time model of a GPU preset (or of this machine's
// CPU, calibrated), and reports throughput, latency percentiles, prefix-cache hit rate,
// preemptions and concurrency over time. --sweep runs every combination of some flags' values and
// prints one table.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "sim/sim_report.h"
#include "sim/sim_request.h"
#include "sim/sim_svg.h"
#include "sim/simulation.h"
#include "sim/sweep.h"
#include "sim/trace_parsers.h"
#include "tools/cli_commands.h"
#include "tools/cli_common_flags.h"
#include "tools/cli_hardware_flags.h"

namespace kvs::cli {
namespace {

struct SimulateFlags {
  SimArgs sim;
  std::string trace;
  std::string trace_format = "auto";
  uint32_t trace_block_tokens = 512;
  uint64_t max_requests = 0;
  std::vector<std::string> sweeps;
  bool json = false;
  std::string svg;
  size_t series_points = 100;
  std::string step_log;
};

void run(SimulateFlags& f) {
  if (f.trace.empty()) fail("simulate: --trace FILE is required (Mooncake JSONL or CSV)");
  const TraceFormat format = or_fail(parse_trace_format(f.trace_format), "");
  Trace trace = or_fail(load_trace(f.trace, format, f.trace_block_tokens), "--trace: ");
  truncate_trace(trace, f.max_requests);
  for (const std::string& note : trace.notes) std::fprintf(stderr, "kvserve: %s\n", note.c_str());

  if (f.sweeps.empty()) {
    const SimSetup setup = or_fail(resolve_sim(f.sim), "simulate: ");
    std::unique_ptr<StepLog> step_log;
    if (!f.step_log.empty()) step_log = or_fail(StepLog::open(f.step_log), "--step-log: ");
    const SimResult result = or_fail(run_simulation(setup, trace, step_log.get()), "simulate: ");
    if (step_log != nullptr) {
      const Status closed = step_log->close();
      if (!closed.is_ok()) fail("--step-log: " + closed.message());
    }
    if (f.json)
      std::cout << render_sim_json(setup, result, f.series_points);
    else
      std::cout << render_sim_report(setup, result);
    if (!f.svg.empty()) {
      std::ofstream svg(f.svg);
      svg << render_sim_svg(setup, result);
      if (!svg) fail("--svg: cannot write " + f.svg);
      std::fprintf(stderr, "kvserve: wrote %s\n", f.svg.c_str());
    }
    return;
  }
  if (!f.svg.empty()) fail("--svg draws one run; leave it out of a --sweep");
  if (!f.step_log.empty()) fail("--step-log logs one run; leave it out of a --sweep");
  const std::vector<SweepSettings> combos = or_fail(expand_sweep(f.sweeps), "");
  std::vector<SweepRow> rows;
  for (const SweepSettings& settings : combos) {
    SimArgs args = f.sim;
    std::string label;
    for (const auto& [key, value] : settings) {
      const Status st = apply_sim_setting(args, key, value);
      if (!st.is_ok()) fail(st.message());
      label += (label.empty() ? "" : " ") + key + "=" + value;
    }
    SimSetup setup = or_fail(resolve_sim(args), "simulate (" + label + "): ");
    SimResult result = or_fail(run_simulation(setup, trace), "simulate (" + label + "): ");
    std::fprintf(stderr, "kvserve: %s: %.1f s\n", label.c_str(), result.wall_s);
    rows.push_back({settings, std::move(setup), std::move(result)});
  }
  if (f.json)
    std::cout << render_sweep_json(rows);
  else
    std::cout << "kvserve simulate --sweep: " << trace.source << ", " << trace.requests.size()
              << " requests\n\n"
              << render_sweep_table(rows);
}

}  // namespace

void add_simulate_command(CLI::App& app) {
  auto f = std::make_shared<SimulateFlags>();
  CLI::App* cmd = app.add_subcommand(
      "simulate",
      "Replay a request trace through the engine's own scheduler and KV cache manager in virtual\n"
      "time, at GPU scale (roofline step times per GPU preset) or on this CPU (calibrated).\n"
      "Reports throughput, TTFT/TPOT/end-to-end percentiles, prefix-cache hit rate, preemptions\n"
      "and concurrency; see docs/simulate.md.");
  add_hardware_flags(cmd, &f->sim.hw);
  cmd->add_option("--gpus", f->sim.gpus,
                  "GPUs in all: --gpus / --tp engine replicas, requests assigned round robin "
                  "(default: --tp, one replica)");
  cmd->add_option("--device", f->sim.device,
                  "gpu: the --gpu preset's roofline; cpu: this machine, from --device-file")
      ->capture_default_str();
  cmd->add_option("--device-file", f->sim.device_file,
                  "calibrated CPU constants (default: data/devices/cpu.json; write one with "
                  "build/bench/sim_calibrate)");
  add_kv_cache_memory_flag(*cmd, &f->sim.kv_cache_memory, FlagRole::kSimulatedEngine);
  add_block_size_flag(*cmd, &f->sim.block_size, FlagRole::kSimulatedEngine);
  add_max_num_seqs_flag(*cmd, &f->sim.max_num_seqs, FlagRole::kSimulatedEngine);
  add_max_num_batched_tokens_flag(*cmd, &f->sim.max_num_batched_tokens, FlagRole::kSimulatedEngine);
  add_kv_recent_window_flag(*cmd, &f->sim.recent_window, FlagRole::kSimulatedEngine);
  add_kv_recent_window_dtype_flag(*cmd, &f->sim.recent_window_dtype, FlagRole::kSimulatedEngine);
  add_kv_attention_sink_flag(*cmd, &f->sim.attention_sink, FlagRole::kSimulatedEngine);
  add_preemption_flags(*cmd, &f->sim.preemption_mode, &f->sim.swap_space,
                       FlagRole::kSimulatedEngine);
  add_prefix_caching_flag(*cmd, &f->sim.enable_prefix_caching);
  add_max_model_len_flag(*cmd, &f->sim.max_model_len);
  cmd->add_option("--trace", f->trace, "the trace: Mooncake JSONL or CSV (docs/simulate.md)");
  cmd->add_option("--trace-format", f->trace_format, "auto, mooncake or csv")
      ->capture_default_str();
  cmd->add_option("--trace-block-tokens", f->trace_block_tokens,
                  "tokens per hash id of a Mooncake trace")
      ->capture_default_str();
  cmd->add_option("--rate-scale", f->sim.rate_scale, "multiply the request rate (arrivals / x)")
      ->capture_default_str();
  cmd->add_option("--arrival-jitter-ms", f->sim.arrival_jitter_ms,
                  "delay each arrival by a random [0, MS) ms and re-sort: the order in which a "
                  "real server sees requests the trace stamps with one time (0 = off)")
      ->capture_default_str();
  cmd->add_option("--seed", f->sim.seed,
                  "seed of --arrival-jitter-ms (--sweep seed=1,2,3 shows the spread)")
      ->capture_default_str();
  cmd->add_option("--max-requests", f->max_requests, "replay only the first N requests");
  cmd->add_option("--vocab-size", f->sim.vocab_size,
                  "bound of the synthesized token ids (default: the model's vocabulary)");
  cmd->add_option(
      "--sweep", f->sweeps,
      "KEY=V1,V2: run every combination, one table (keys: kv-cache-dtype, gpu, "
      "gpus, tp, memory, block-size, max-num-seqs, max-num-batched-tokens, kv-recent-window, "
      "kv-recent-window-dtype, "
      "preemption-mode, enable-prefix-caching, rate-scale, ...); the per-layer lists "
      "kv-cache-dtype-k-layers and kv-cache-dtype-v-layers hold commas, so their values are "
      "separated by ';'");
  cmd->add_flag("--json", f->json, "print the results as JSON");
  cmd->add_option("--svg", f->svg, "write running/waiting, KV occupancy and preemptions to FILE");
  cmd->add_option("--series-points", f->series_points, "time-series points in --json (0..100000)")
      ->check(CLI::Range(size_t{0}, size_t{100000}))
      ->capture_default_str();
  add_step_log_flag(*cmd, &f->step_log, FlagRole::kSimulatedEngine);
  add_config_flag(*cmd);
  cmd->callback([f] { run(*f); });
}

}  // namespace kvs::cli
