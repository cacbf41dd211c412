#include "sim/sim_report.h"

#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/byte_size.h"

namespace kvs {

namespace {

using ojson = nlohmann::ordered_json;

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// Seconds with a unit that keeps 3 significant digits readable.
std::string secs(double s) {
  if (s < 1e-3) return fmt("%.0f us", s * 1e6);
  if (s < 1) return fmt("%.1f ms", s * 1e3);
  return fmt("%.2f s", s);
}

std::string pct(double f) { return fmt("%.1f%%", f * 100); }

std::string latency_row(const char* name, const Percentiles& p) {
  std::ostringstream o;
  char buf[160];
  std::snprintf(buf, sizeof buf, "  %-19s p50 %-10s p90 %-10s p99 %-10s mean %-10s max %s\n", name,
                secs(p.p50).c_str(), secs(p.p90).c_str(), secs(p.p99).c_str(), secs(p.mean).c_str(),
                secs(p.max).c_str());
  return buf;
}

std::string device_line(const SimSetup& s) {
  const DeviceModel& d = s.device;
  std::ostringstream o;
  if (s.args.device == "cpu") {
    o << "cpu (calibrated): " << fmt("%.1f", d.peak_flops / 1e9) << " GFLOP/s matmul, "
      << fmt("%.1f", (d.attention_flops > 0 ? d.attention_flops : d.peak_flops) / 1e9)
      << " GFLOP/s attention, " << fmt("%.1f", d.memory_bandwidth / 1e9) << " GB/s, "
      << secs(d.step_overhead_s) << "/step + " << secs(d.sequence_overhead_s) << "/sequence";
  } else {
    o << d.name << " x " << s.replicas * s.tp << " (tp " << s.tp << ", " << s.replicas
      << (s.replicas == 1 ? " replica" : " replicas") << "): " << fmt("%.0f", d.peak_flops / 1e12)
      << " TFLOP/s x " << fmt("%.2f", d.compute_efficiency) << ", "
      << fmt("%.2f", d.memory_bandwidth / 1e12) << " TB/s x " << fmt("%.2f", d.memory_efficiency)
      << ", " << secs(d.step_overhead_s) << "/step";
  }
  return o.str();
}

ojson percentiles_json(const Percentiles& p) {
  return ojson{{"count", p.count}, {"mean", p.mean}, {"p50", p.p50},
               {"p90", p.p90},     {"p99", p.p99},   {"max", p.max}};
}

ojson setup_json(const SimSetup& s) {
  ojson j;
  j["model"] = s.plan.model.name;
  j["device"] = s.args.device == "cpu" ? "cpu" : s.device.name;
  j["gpus"] = s.replicas * s.tp;
  j["tp"] = s.tp;
  j["replicas"] = s.replicas;
  j["kv_cache_dtype_k"] = kv_dtype_name(s.pool.shape.k_dtype);
  j["kv_cache_dtype_v"] = kv_dtype_name(s.pool.shape.v_dtype);
  j["kv_cache_dtype_k_layers"] = kv_layer_formats_text(s.pool.shape.layer_formats, 'k');
  j["kv_cache_dtype_v_layers"] = kv_layer_formats_text(s.pool.shape.layer_formats, 'v');
  j["kv_bytes_per_token_per_rank"] = s.pool.bytes_per_token;
  j["block_size"] = s.pool.block_size;
  j["num_blocks"] = s.pool.num_blocks;
  j["pool_bytes_per_rank"] = s.pool.pool_bytes;
  j["pool_tokens"] = s.pool.num_tokens;
  j["key_tail_bytes_per_rank"] = s.pool.key_tail_bytes;
  j["recent_window"] = s.pool.recent_window;
  j["recent_window_bytes_per_rank"] = s.pool.recent_window_bytes;
  j["pool_origin"] = s.pool_origin;
  j["weights_bytes"] = s.plan.weights.bytes;
  j["gpu_memory_bytes"] = s.plan.gpu_memory.bytes;
  j["gpu_memory_overridden"] = s.plan.gpu_memory_overridden;
  j["max_num_seqs"] = s.scheduler.max_num_seqs;
  j["max_num_batched_tokens"] = s.scheduler.max_num_batched_tokens;
  j["preemption_mode"] = preemption_mode_name(s.scheduler.preemption_mode);
  j["swap_blocks"] = s.host_blocks;
  j["enable_prefix_caching"] = s.enable_prefix_caching;
  j["max_model_len"] = s.max_model_len;
  j["rate_scale"] = s.args.rate_scale;
  j["arrival_jitter_ms"] = s.args.arrival_jitter_ms;
  j["seed"] = s.args.seed;
  j["device_model"] = ojson{{"description", s.device.description},
                            {"peak_flops", s.device.peak_flops},
                            {"peak_flops_fp8", s.device.peak_flops_fp8},
                            {"attention_flops", s.device.attention_flops},
                            {"memory_bandwidth", s.device.memory_bandwidth},
                            {"compute_efficiency", s.device.compute_efficiency},
                            {"memory_efficiency", s.device.memory_efficiency},
                            {"step_overhead_s", s.device.step_overhead_s},
                            {"sequence_overhead_s", s.device.sequence_overhead_s}};
  return j;
}

ojson results_json(const SimResult& r) {
  const SimSummary& m = r.summary;
  ojson j;
  j["requests"] = m.requests;
  j["completed"] = m.completed;
  j["rejected"] = m.rejected;
  j["makespan_s"] = m.makespan_s;
  j["requests_per_s"] = m.requests_per_s;
  j["input_tokens_per_s"] = m.input_tokens_per_s;
  j["output_tokens_per_s"] = m.output_tokens_per_s;
  j["input_tokens"] = m.input_tokens;
  j["output_tokens"] = m.output_tokens;
  j["ttft_s"] = percentiles_json(m.ttft_s);
  j["tpot_s"] = percentiles_json(m.tpot_s);
  j["e2e_s"] = percentiles_json(m.e2e_s);
  j["prefix_cache_hit_rate"] = m.prefix_cache_hit_rate;
  j["prefix_cache_query_tokens"] = m.prefix_query_tokens;
  j["prefix_cache_hit_tokens"] = m.prefix_hit_tokens;
  j["prefix_cache_partial_block_tokens"] = m.prefix_partial_tokens;
  j["prompt_tokens_computed"] = m.prompt_tokens_computed;
  j["evictions"] = m.evictions;
  j["preemptions"] = ojson{{"recompute", m.preemptions_recompute},
                           {"swap", m.preemptions_swap},
                           {"requests_preempted", m.requests_preempted}};
  j["running_mean"] = m.running_mean;
  j["running_max"] = m.running_max;
  j["waiting_mean"] = m.waiting_mean;
  j["waiting_max"] = m.waiting_max;
  j["kv_in_use_mean"] = m.kv_in_use_mean;
  j["kv_in_use_max"] = m.kv_in_use_max;
  j["static_concurrency_mean_length"] = r.static_concurrency_mean;
  j["static_concurrency_longest"] = r.static_concurrency_longest;
  j["steps"] = m.steps;
  j["busy_fraction"] = m.busy_fraction;
  j["compute_bound_fraction"] = m.compute_bound_fraction;
  j["first_token_wraps"] = r.first_token_wraps;
  j["wall_s"] = r.wall_s;
  return j;
}

ojson trace_json(const TraceStats& t, const std::string& source) {
  return ojson{{"source", source},
               {"requests", t.requests},
               {"duration_s", t.duration_s},
               {"input_tokens", t.input_tokens},
               {"output_tokens", t.output_tokens},
               {"reuse_ratio", t.reuse_ratio()}};
}

}  // namespace

std::string render_sim_report(const SimSetup& s, const SimResult& r) {
  const SimSummary& m = r.summary;
  const TraceStats& t = r.trace;
  std::ostringstream o;
  o << "kvserve simulate\n\n";
  o << "  trace       " << r.trace_source << "\n              " << t.requests << " requests over "
    << secs(t.duration_s) << "; mean prompt "
    << format_thousands(t.requests ? t.input_tokens / t.requests : 0) << ", output "
    << format_thousands(t.requests ? t.output_tokens / t.requests : 0)
    << " tokens; prompt reuse in the trace " << pct(t.reuse_ratio());
  if (s.args.rate_scale != 1) o << "; rate x" << fmt("%g", s.args.rate_scale);
  if (s.args.arrival_jitter_ms > 0)
    o << "; arrivals + [0, " << fmt("%g", s.args.arrival_jitter_ms) << ") ms, seed " << s.args.seed;
  o << "\n";
  o << "  model       " << s.plan.model.display_name << " (" << s.plan.model.name << "), weights "
    << format_thousands(s.plan.weights.bytes) << " B\n";
  o << "  device      " << device_line(s) << "\n";
  if (s.plan.gpu_memory_overridden)
    o << "  memory      GPU " << s.plan.gpu_name << " with --memory " << s.plan.gpu_memory.text
      << ": " << format_thousands(s.plan.gpu_memory.bytes) << " B per GPU instead of the preset's "
      << format_thousands(s.plan.gpu_preset_memory_bytes) << " B (its compute and bandwidth)\n";
  o << "  KV pool     " << s.pool.formula << " per token per rank ("
    << kv_dtype_name(s.pool.shape.k_dtype) << kv_layer_formats_suffix(s.pool.shape.layer_formats)
    << "); " << format_thousands(s.pool.num_blocks) << " blocks of " << s.pool.block_size << " = "
    << format_thousands(s.pool.num_tokens) << " tokens per replica\n";
  o << "              from " << s.pool_origin;
  if (s.pool.key_tail_bytes > 0)
    o << ", less " << format_thousands(s.pool.key_tail_bytes) << " B of key tails";
  if (s.pool.recent_window_bytes > 0)
    o << ", less " << format_thousands(s.pool.recent_window_bytes)
      << " B of recent window (--kv-recent-window " << s.pool.recent_window
      << (s.pool.recent_window_dtype == KvDtype::kInt8 ? ", int8 rows" : "") << ")";
  o << "\n";
  o << "  scheduler   max-num-seqs " << s.scheduler.max_num_seqs << ", max-num-batched-tokens "
    << s.scheduler.max_num_batched_tokens << ", preemption "
    << preemption_mode_name(s.scheduler.preemption_mode)
    << (s.host_blocks ? " (" + format_thousands(s.host_blocks) + " host blocks)" : "")
    << ", prefix caching " << (s.enable_prefix_caching ? "on" : "off") << ", max-model-len "
    << format_thousands(s.max_model_len) << "\n\n";

  o << "Results (virtual time)\n";
  o << "  completed          " << m.completed << " of " << m.requests << " (" << m.rejected
    << " rejected: longer than max-model-len or the pool)\n";
  o << "  makespan           " << secs(m.makespan_s) << "\n";
  o << "  throughput         " << fmt("%.2f", m.requests_per_s) << " req/s, "
    << format_thousands(static_cast<uint64_t>(m.input_tokens_per_s)) << " prompt tok/s, "
    << format_thousands(static_cast<uint64_t>(m.output_tokens_per_s)) << " output tok/s\n";
  o << latency_row("TTFT", m.ttft_s);
  o << latency_row("TPOT", m.tpot_s);
  o << latency_row("end to end", m.e2e_s);
  o << "  running            mean " << fmt("%.1f", m.running_mean) << ", max " << m.running_max
    << " per replica; waiting mean " << fmt("%.1f", m.waiting_mean) << ", max " << m.waiting_max
    << "\n";
  o << "  static plan        " << fmt("%.1f", r.static_concurrency_mean)
    << " requests fit per replica at the trace's mean length, "
    << fmt("%.1f", r.static_concurrency_longest) << " at its longest\n";
  o << "  KV in use          mean " << pct(m.kv_in_use_mean) << ", max " << pct(m.kv_in_use_max)
    << " of the blocks\n";
  o << "  prefix cache       hit rate " << pct(m.prefix_cache_hit_rate) << " of prompt tokens ("
    << format_thousands(m.prefix_hit_tokens) << " of " << format_thousands(m.prefix_query_tokens)
    << ", whole blocks; +" << format_thousands(m.prefix_partial_tokens)
    << " partial-block tokens); " << format_thousands(m.evictions) << " evictions\n";
  o << "  preemptions        recompute " << m.preemptions_recompute << ", swap "
    << m.preemptions_swap << " (" << m.requests_preempted << " requests preempted)\n";
  o << "  steps              " << format_thousands(m.steps) << "; busy " << pct(m.busy_fraction)
    << " of the time, compute-bound " << pct(m.compute_bound_fraction) << " of that\n";
  if (r.first_token_wraps > 0)
    o << "  warning            " << r.first_token_wraps
      << " prompt blocks share a first token with an unrelated sibling (more siblings than "
         "vocab/2): hits may exceed the trace's sharing slightly\n";
  o << "  simulated in       " << secs(r.wall_s) << " on this machine\n";
  return o.str();
}

std::string render_sim_json(const SimSetup& s, const SimResult& r, size_t series_points) {
  ojson j;
  j["setup"] = setup_json(s);
  j["trace"] = trace_json(r.trace, r.trace_source);
  j["results"] = results_json(r);
  // The headline fields at the top level too (scripts read these).
  j["prefix_cache_hit_rate"] = r.summary.prefix_cache_hit_rate;
  j["output_tokens_per_s"] = r.summary.output_tokens_per_s;
  if (series_points > 0) {
    ojson series = ojson::array();
    for (const SeriesPoint& p :
         time_series(r.replicas, s.pool.num_blocks, r.summary.makespan_s, series_points))
      series.push_back(ojson{{"t", p.start_s},
                             {"running", p.running},
                             {"waiting", p.waiting},
                             {"kv_in_use", p.kv_in_use},
                             {"kv_cached_free", p.kv_cached_free},
                             {"preempted_recompute", p.preempted_recompute},
                             {"preempted_swap", p.preempted_swap}});
    j["time_series"] = std::move(series);
  }
  return j.dump(2) + "\n";
}

std::string render_sweep_table(const std::vector<SweepRow>& rows) {
  std::ostringstream o;
  if (rows.empty()) return "";
  std::vector<std::string> head;
  for (const auto& [k, v] : rows.front().settings) head.push_back(k);
  const char* cols[] = {"done",     "req/s",   "out tok/s", "TTFT p50", "TTFT p99", "TPOT p50",
                        "hit rate", "preempt", "running",   "KV used",  "sim s"};
  std::vector<std::vector<std::string>> table;
  std::vector<std::string> header = head;
  for (const char* c : cols) header.push_back(c);
  table.push_back(header);
  for (const SweepRow& row : rows) {
    const SimSummary& m = row.result.summary;
    std::vector<std::string> cells;
    for (const auto& [k, v] : row.settings) cells.push_back(v);
    cells.push_back(std::to_string(m.completed) + "/" + std::to_string(m.requests));
    cells.push_back(fmt("%.2f", m.requests_per_s));
    cells.push_back(format_thousands(static_cast<uint64_t>(m.output_tokens_per_s)));
    cells.push_back(secs(m.ttft_s.p50));
    cells.push_back(secs(m.ttft_s.p99));
    cells.push_back(secs(m.tpot_s.p50));
    cells.push_back(pct(m.prefix_cache_hit_rate));
    cells.push_back(std::to_string(m.preemptions_recompute + m.preemptions_swap));
    cells.push_back(fmt("%.1f", m.running_mean));
    cells.push_back(pct(m.kv_in_use_mean));
    cells.push_back(fmt("%.1f", row.result.wall_s));
    table.push_back(cells);
  }
  std::vector<size_t> width(table.front().size(), 0);
  for (const auto& r : table)
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  for (const auto& r : table) {
    for (size_t i = 0; i < r.size(); ++i) {
      const std::string pad(width[i] - r[i].size(), ' ');
      o << (i == 0 ? "" : "  ") << (i < head.size() ? r[i] + pad : pad + r[i]);
    }
    o << "\n";
  }
  return o.str();
}

std::string render_sweep_json(const std::vector<SweepRow>& rows) {
  ojson runs = ojson::array();
  for (const SweepRow& row : rows) {
    ojson settings;
    for (const auto& [k, v] : row.settings) settings[k] = v;
    ojson j;
    j["settings"] = std::move(settings);
    j["setup"] = setup_json(row.setup);
    j["results"] = results_json(row.result);
    j["prefix_cache_hit_rate"] = row.result.summary.prefix_cache_hit_rate;
    runs.push_back(std::move(j));
  }
  return ojson{{"sweep", std::move(runs)}}.dump(2) + "\n";
}

}  // namespace kvs
