// `kvserve plan`: the KV cache capacity planner. Reads a model (catalog name, config.json,
// directory or GGUF), a GPU (preset or --memory) and a workload, and prints the capacity report
// (or --json), optionally drawing --svg.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/byte_size.h"
#include "model/gguf_file.h"
#include "planner/catalog.h"
#include "planner/gpu_presets.h"
#include "planner/plan_hardware.h"
#include "planner/plan_json.h"
#include "planner/plan_report.h"
#include "planner/plan_request.h"
#include "planner/plan_svg.h"
#include "planner/tier_capacity.h"
#include "quant/recent_window.h"
#include "tools/cli_commands.h"
#include "tools/cli_common_flags.h"
#include "tools/cli_hardware_flags.h"

namespace kvs::cli {
namespace {

struct PlanFlags {
  HardwareArgs hw;
  uint64_t context = 8192;
  uint64_t max_model_len = 0;  // vLLM's name of --context; 0: not given
  CLI::Option* context_flag = nullptr;
  CLI::Option* max_model_len_flag = nullptr;
  double avg_tokens = 0;
  std::string lengths_file;
  uint64_t concurrency = 0;
  uint32_t block_size = 16;
  uint32_t max_num_seqs = 64;  // the engine's default (EngineConfig)
  uint32_t kv_recent_window = 0;
  std::string kv_recent_window_dtype = "f16";
  bool kv_attention_sink = false;
  uint64_t max_num_batched_tokens = 0;  // 0: windows at their size; the engine's chunk 512
  uint64_t shared_prefix = 0;
  bool json = false;
  std::string svg;
  std::string kv_cache_memory;
  std::string kv_offload_memory;
  std::string kv_offload_disk_bytes;
  bool list_models = false;
  bool list_gpus = false;
};

void list_models() {
  const auto names = or_fail(catalog_names(), "");
  for (const std::string& n : names) {
    auto m = load_catalog_model(n);
    if (!m.is_ok()) {
      std::printf("%-22s (unreadable: %s)\n", n.c_str(), m.status().message().c_str());
      continue;
    }
    const KvShapeBytes b = kv_shape_bytes(m->kv_shape(KvDtype::kBF16, KvDtype::kBF16, 1));
    std::printf("%-22s %-40s %9s B/token (bf16)\n", n.c_str(), m->display_name.c_str(),
                format_thousands(b.bytes_per_token).c_str());
    // The Hugging Face ids --model also takes for this entry.
    const auto ids = catalog_hf_ids(n);
    if (ids.is_ok() && !ids->empty()) {
      std::string line;
      for (const std::string& id : *ids) line += (line.empty() ? "" : ", ") + id;
      std::printf("%-22s %s\n", "", line.c_str());
    }
  }
}

void list_gpus() {
  for (const GpuPreset& p : gpu_presets())
    std::printf("%-15s %s\n                %s\n                source: %s\n", p.name,
                bytes_both_units(p.memory_bytes).c_str(), p.note, p.source);
}

void run(const PlanFlags& f) {
  if (f.list_models) return list_models();
  if (f.list_gpus) return list_gpus();
  if (f.hw.model.empty())
    fail(
        "plan: --model (or MODEL) is required: a catalog name, a Hugging Face id of the catalog, "
        "config.json, a directory or GGUF; --list-models shows the catalog");
  PlanRequest r = or_fail(plan_request_from_hardware(f.hw), "");

  uint64_t context = f.context;
  if (f.max_model_len_flag->count() > 0) {
    if (f.context_flag->count() > 0 && f.context != f.max_model_len)
      fail("plan: --context " + std::to_string(f.context) + " and --max-model-len " +
           std::to_string(f.max_model_len) + " differ; they are one setting, give one");
    context = f.max_model_len;
  }
  r.workload.context = context;
  r.workload.block_size = f.block_size;
  r.engine_max_num_seqs = f.max_num_seqs;
  r.engine_recent_window = f.kv_recent_window;
  auto window_dtype = parse_recent_window_dtype(f.kv_recent_window_dtype);
  if (!window_dtype.is_ok()) fail(window_dtype.status().message());
  r.engine_recent_window_dtype = *window_dtype;
  r.engine_attention_sink = f.kv_attention_sink;
  r.workload.shared_prefix = f.shared_prefix;
  r.workload.window_chunk_tokens = f.max_num_batched_tokens;
  if (f.max_num_batched_tokens > 0) {
    if (f.max_num_batched_tokens > UINT32_MAX) fail("--max-num-batched-tokens is too large");
    r.engine_prefill_chunk = static_cast<uint32_t>(f.max_num_batched_tokens);
  }
  if (f.concurrency > 0) r.workload.concurrency = f.concurrency;
  if (f.avg_tokens != 0) {
    if (!(f.avg_tokens > 0) || !std::isfinite(f.avg_tokens) || f.avg_tokens > 1e12)
      fail("--avg-tokens must be a positive number of tokens");
    r.workload.avg_tokens = f.avg_tokens;
  }
  if (!f.lengths_file.empty()) {
    std::ifstream in(f.lengths_file);
    if (!in) fail("--lengths: cannot open " + f.lengths_file);
    std::stringstream ss;
    ss << in.rdbuf();
    r.workload.length_distribution =
        or_fail(parse_length_distribution(ss.str()), "--lengths " + f.lengths_file + ": ");
    r.length_distribution_origin = f.lengths_file;
  }

  // A GGUF's layers come from the engine's own reader (model_spec.h), so the numbers are the
  // engine's. Any model the engine could page also gets the engine's per-sequence footprint.
  if (auto shape = engine_kv_shape(r.model, r.k_dtype, r.v_dtype); shape.is_ok())
    r.engine_kv_shape = std::move(shape).value();
  if (!f.kv_cache_memory.empty()) {
    r.kv_cache_memory = or_fail(parse_size_input(f.kv_cache_memory), "--kv-cache-memory: ");
    r.engine_kv_shape =
        or_fail(engine_kv_shape(r.model, r.k_dtype, r.v_dtype), "--kv-cache-memory: ");
  }

  const PlanOutcome out = or_fail(run_plan(r), "plan: ");
  std::vector<TierCapacityRow> tiers;
  uint64_t host = 0, disk = 0;
  if (!f.kv_offload_memory.empty() || !f.kv_offload_disk_bytes.empty()) {
    if (!f.kv_offload_memory.empty())
      host = or_fail(parse_byte_size(f.kv_offload_memory), "--kv-offload-memory: ");
    if (!f.kv_offload_disk_bytes.empty())
      disk = or_fail(parse_byte_size(f.kv_offload_disk_bytes), "--kv-offload-disk-bytes: ");
    if (f.block_size == 0) fail("--kv-offload-*: the tiers hold whole blocks (--block-size > 0)");
    tiers = plan_tier_capacity(r.model, r.tp, f.block_size, host, disk);
  }
  if (f.json) {
    if (tiers.empty()) {
      std::cout << render_plan_json(out);
    } else {
      nlohmann::json j = nlohmann::json::parse(render_plan_json(out));
      nlohmann::json rows = nlohmann::json::array();
      for (const TierCapacityRow& t : tiers)
        rows.push_back({{"kv_cache_dtype", kv_dtype_name(t.dtype)},
                        {"bytes_per_token", t.bytes_per_token},
                        {"block_bytes", t.block_bytes},
                        {"host_blocks", t.host_blocks},
                        {"host_prefix_tokens", t.host_tokens},
                        {"disk_blocks", t.disk_blocks},
                        {"disk_prefix_tokens", t.disk_tokens}});
      j["kv_offload"] = {{"host_bytes", host}, {"disk_bytes", disk}, {"formats", rows}};
      std::cout << j.dump(2) << "\n";
    }
  } else {
    std::cout << render_plan_report(out);
    if (!tiers.empty()) {
      std::printf(
          "\nKV offload tiers: prefix tokens they hold (whole %u-token blocks; disk in "
          "16-block extents with headers)\n",
          f.block_size);
      std::printf("  host %s, disk %s\n", format_bytes_binary(host).c_str(),
                  format_bytes_binary(disk).c_str());
      std::printf("  %-14s %12s %14s %16s\n", "format", "B/token", "host tokens", "disk tokens");
      for (const TierCapacityRow& t : tiers)
        std::printf("  %-14s %12s %14s %16s\n", kv_dtype_name(t.dtype),
                    format_thousands(t.bytes_per_token).c_str(),
                    format_thousands(t.host_tokens).c_str(),
                    format_thousands(t.disk_tokens).c_str());
    }
  }
  if (!f.svg.empty()) {
    std::ofstream svg(f.svg);
    svg << render_plan_svg(out);
    if (!svg) fail("--svg: cannot write " + f.svg);
    std::fprintf(stderr, "kvserve: wrote %s\n", f.svg.c_str());
  }
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto flags = std::make_shared<PlanFlags>();
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "KV cache capacity planner: bytes per token, per request, how many requests fit.\n"
      "Units: GB = 10^9 B, GiB = 2^30 B (both accepted, e.g. --memory 80GB or 75GiB).");
  add_hardware_flags(cmd, &flags->hw);
  flags->context_flag =
      cmd->add_option("--context", flags->context, "tokens per request (worst case: all at this)")
          ->capture_default_str();
  flags->max_model_len_flag =
      cmd->add_option("--max-model-len", flags->max_model_len,
                      "the same as --context, by the name serve, generate and simulate (and vLLM) "
                      "give it");
  cmd->add_option("--avg-tokens", flags->avg_tokens, "expected tokens per request");
  cmd->add_option("--lengths", flags->lengths_file,
                  "length distribution file: lines of 'tokens [weight]'");
  cmd->add_option("--concurrency", flags->concurrency, "concurrent requests: does this fit?");
  add_block_size_flag(*cmd, &flags->block_size, FlagRole::kPlanner);
  add_max_num_seqs_flag(*cmd, &flags->max_num_seqs, FlagRole::kPlanner);
  add_kv_recent_window_flag(*cmd, &flags->kv_recent_window, FlagRole::kPlanner);
  add_kv_recent_window_dtype_flag(*cmd, &flags->kv_recent_window_dtype, FlagRole::kPlanner);
  add_kv_attention_sink_flag(*cmd, &flags->kv_attention_sink, FlagRole::kPlanner);
  add_max_num_batched_tokens_flag(*cmd, &flags->max_num_batched_tokens, FlagRole::kPlanner);
  cmd->add_option("--shared-prefix", flags->shared_prefix,
                  "tokens of prompt prefix every request shares");
  cmd->add_flag("--json", flags->json, "print the plan as JSON with exact byte counts");
  cmd->add_option("--svg", flags->svg, "write a memory-vs-concurrency chart to FILE");
  add_kv_cache_memory_flag(*cmd, &flags->kv_cache_memory, FlagRole::kPlanner);
  add_kv_offload_memory_flag(*cmd, &flags->kv_offload_memory, FlagRole::kPlanner);
  add_kv_offload_disk_bytes_flag(*cmd, &flags->kv_offload_disk_bytes, FlagRole::kPlanner);
  cmd->add_flag("--list-models", flags->list_models, "list the built-in model catalog");
  cmd->add_flag("--list-gpus", flags->list_gpus, "list the GPU presets");
  add_config_flag(*cmd);
  cmd->callback([flags] { run(*flags); });
}

}  // namespace kvs::cli
