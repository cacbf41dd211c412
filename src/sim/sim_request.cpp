#include "sim/sim_request.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>

#include "core/byte_size.h"
#include "engine/step_driver.h"
#include "model/model_paths.h"
#include "planner/capacity_plan.h"
#include "planner/catalog.h"
#include "quant/recent_window.h"
#include "sim/token_synthesizer.h"

namespace kvs {

namespace {

// Device defaults for the scheduler: vLLM's V1 defaults on datacenter GPUs, the engine's own
// (`kvserve serve`) on the CPU.
constexpr uint32_t kGpuMaxNumSeqs = 256;
constexpr uint32_t kGpuMaxBatchedTokens = 8192;
constexpr uint32_t kCpuMaxNumSeqs = 64;
constexpr uint32_t kCpuMaxBatchedTokens = 512;

template <typename T>
Result<T> parse_number(const std::string& key, const std::string& v) {
  T out{};
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || end != v.data() + v.size())
    return invalid_argument("--sweep " + key + ": '" + v + "' is not a number");
  return out;
}

Result<bool> parse_on_off(const std::string& key, const std::string& v) {
  if (v == "on" || v == "true" || v == "1") return true;
  if (v == "off" || v == "false" || v == "0") return false;
  return invalid_argument("--sweep " + key + ": '" + v + "' is not on/off");
}

}  // namespace

Result<SimSetup> resolve_sim(const SimArgs& a) {
  SimSetup s;
  s.args = a;
  const bool cpu = a.device == "cpu";
  if (!cpu && a.device != "gpu")
    return invalid_argument("--device must be gpu or cpu, got '" + a.device + "'");
  HardwareArgs hw = a.hw;
  if (cpu && hw.model.empty()) {
    KVS_ASSIGN_OR_RETURN(hw.model, resolve_model_path(""));
  }
  if (hw.model.empty())
    return invalid_argument(
        "--model is required (a catalog name, config.json or GGUF; kvserve plan --list-models)");
  KVS_ASSIGN_OR_RETURN(s.plan, plan_request_from_hardware(hw));
  const PlannerModel& model = s.plan.model;
  s.tp = s.plan.tp;
  if (cpu && s.tp != 1) return invalid_argument("--device cpu runs one rank: --tp must be 1");
  const uint32_t gpus = a.gpus == 0 ? s.tp : a.gpus;
  // Each replica is simulated with its own scheduler and cache: the count is memory.
  constexpr uint32_t kMaxGpus = 4096;
  if (gpus > kMaxGpus)
    return invalid_argument("--gpus " + std::to_string(gpus) + " is more than the " +
                            std::to_string(kMaxGpus) + " GPUs a simulation may have");
  if (gpus % s.tp != 0)
    return invalid_argument("--gpus " + std::to_string(gpus) + " is not a multiple of --tp " +
                            std::to_string(s.tp));
  s.replicas = gpus / s.tp;

  auto engine_shape = engine_kv_shape(model, s.plan.k_dtype, s.plan.v_dtype);
  if (!engine_shape.is_ok())
    return Status(engine_shape.status().code(),
                  "kvserve simulate runs the engine's scheduler and cache, which need a model "
                  "the engine can run: " +
                      engine_shape.status().message());
  // One rank's pool: the KV heads a rank holds (the engine's pool is one rank, tp 1).
  KvModelShape shape = *engine_shape;
  for (KvLayer& l : shape.layers) l.kv_heads = kv_heads_per_rank(l.kv_heads, s.tp);
  shape.layer_formats = s.plan.layer_formats;

  s.max_model_len = a.max_model_len != 0     ? a.max_model_len
                    : model.max_context != 0 ? model.max_context
                                             : std::numeric_limits<uint32_t>::max();
  uint64_t pool_bytes = 0;
  if (!a.kv_cache_memory.empty()) {
    auto mem = parse_byte_size(a.kv_cache_memory);
    if (!mem.is_ok())
      return Status(mem.status().code(), "--kv-cache-memory: " + mem.status().message());
    pool_bytes = *mem;
    s.pool_origin = "--kv-cache-memory " + a.kv_cache_memory;
  } else if (cpu) {
    return invalid_argument(
        "--device cpu needs --kv-cache-memory (the pool `kvserve serve` would get, e.g. 512MiB)");
  } else {
    PlanInputs in;
    in.shape = model.kv_shape(s.plan.k_dtype, s.plan.v_dtype, s.tp);
    in.shape.layer_formats = s.plan.layer_formats;
    in.gpu_memory_bytes = s.plan.gpu_memory.bytes;
    in.gpu_memory_utilization = s.plan.utilization;
    in.weights_bytes = s.plan.weights.bytes;
    in.workspace_bytes = s.plan.workspace.bytes;
    in.workload.context = std::min<uint64_t>(s.max_model_len, 1u << 30);
    in.workload.block_size = a.block_size;
    KVS_ASSIGN_OR_RETURN(const CapacityPlan cap, plan_capacity(in));
    if (cap.kv_budget_signed <= 0)
      return resource_exhausted("no memory left for the KV cache: usable " +
                                format_thousands(cap.usable_bytes) + " B - weights " +
                                format_thousands(cap.weights_per_gpu) + " B per GPU - workspace " +
                                format_thousands(s.plan.workspace.bytes) + " B <= 0");
    pool_bytes = cap.kv_budget;
    s.kv_budget = cap.kv_budget;
    s.pool_origin = "floor(" + format_thousands(s.plan.gpu_memory.bytes) + " B x " +
                    std::to_string(s.plan.utilization).substr(0, 4) + ") - weights " +
                    format_thousands(cap.weights_per_gpu) + " B - workspace " +
                    format_thousands(s.plan.workspace.bytes) + " B per GPU";
  }
  // The engine's pool for these flags: per-channel keys' tails and the recent-token window for
  // --max-num-seqs sequences come out of the budget first (kv_pool_plan.h).
  s.scheduler.max_num_seqs =
      a.max_num_seqs != 0 ? a.max_num_seqs : (cpu ? kCpuMaxNumSeqs : kGpuMaxNumSeqs);
  s.scheduler.recent_window = a.recent_window;
  KVS_ASSIGN_OR_RETURN(const KvDtype window_dtype,
                       parse_recent_window_dtype(a.recent_window_dtype));
  auto pool = plan_kv_pool(shape, pool_bytes, a.block_size, s.scheduler.max_num_seqs,
                           a.recent_window, a.attention_sink, window_dtype);
  if (!pool.is_ok()) return Status(pool.status().code(), "KV pool: " + pool.status().message());
  s.pool = *pool;

  if (cpu) {
    std::string path = a.device_file;
    if (path.empty()) {
      KVS_ASSIGN_OR_RETURN(const std::string dir, find_data_dir());
      path = (std::filesystem::path(dir) / "devices" / "cpu.json").string();
    }
    KVS_ASSIGN_OR_RETURN(s.device, read_device_file(path));
  } else {
    KVS_ASSIGN_OR_RETURN(s.device,
                         gpu_device_model(s.plan.gpu_name.empty() ? "H100-80GB" : s.plan.gpu_name));
    if (s.plan.gpu_name.empty())
      s.device.description += " (--memory given: the H100 roofline is assumed)";
  }
  const bool fp8_weights = a.hw.weight_dtype == "fp8" || model.weight_dtype == "fp8";
  KVS_ASSIGN_OR_RETURN(s.cost, model_cost(model, s.plan.weights.bytes, s.pool, s.tp, fp8_weights));

  s.scheduler.max_num_batched_tokens = a.max_num_batched_tokens != 0
                                           ? a.max_num_batched_tokens
                                           : (cpu ? kCpuMaxBatchedTokens : kGpuMaxBatchedTokens);
  KVS_ASSIGN_OR_RETURN(s.scheduler.preemption_mode, parse_preemption_mode(a.preemption_mode));
  KVS_RETURN_IF_ERROR(check_window_preemption(a.recent_window, s.scheduler.preemption_mode));
  auto swap = parse_byte_size(a.swap_space);
  if (!swap.is_ok())
    return Status(swap.status().code(), "--swap-space: " + swap.status().message());
  KVS_ASSIGN_OR_RETURN(s.host_blocks,
                       swap_host_blocks(s.scheduler.preemption_mode, *swap, s.pool.block_bytes));
  s.enable_prefix_caching = a.enable_prefix_caching;
  s.vocab_size = a.vocab_size != 0        ? a.vocab_size
                 : model.vocab_size >= 64 ? model.vocab_size
                                          : kDefaultSimVocab;
  if (s.vocab_size < 64) return invalid_argument("--vocab-size must be at least 64");
  if (!(a.rate_scale > 0) || !std::isfinite(a.rate_scale))
    return invalid_argument("--rate-scale must be a positive number");
  if (!(a.arrival_jitter_ms >= 0) || !std::isfinite(a.arrival_jitter_ms))
    return invalid_argument("--arrival-jitter-ms must be a number >= 0");
  return s;
}

std::vector<std::string> sim_setting_keys() {
  return {"model",
          "kv-cache-dtype",
          "k-dtype",
          "v-dtype",
          "kv-cache-dtype-k-layers",
          "kv-cache-dtype-v-layers",
          "gpu",
          "gpus",
          "tp",
          "memory",
          "gpu-memory-utilization",
          "weights",
          "weight-dtype",
          "workspace",
          "kv-cache-memory",
          "block-size",
          "max-num-seqs",
          "max-num-batched-tokens",
          "kv-recent-window",
          "kv-attention-sink",
          "preemption-mode",
          "swap-space",
          "enable-prefix-caching",
          "max-model-len",
          "rate-scale",
          "arrival-jitter-ms",
          "seed"};
}

Status apply_sim_setting(SimArgs& a, const std::string& key, const std::string& v) {
  if (key == "model") {
    a.hw.model = v;
  } else if (key == "kv-cache-dtype" || key == "kv-dtype") {
    a.hw.kv_dtype = v;
  } else if (key == "k-dtype" || key == "kv-cache-dtype-k") {
    a.hw.k_dtype = v;
  } else if (key == "v-dtype" || key == "kv-cache-dtype-v") {
    a.hw.v_dtype = v;
  } else if (key == "kv-cache-dtype-k-layers") {
    a.hw.k_layers = v;
  } else if (key == "kv-cache-dtype-v-layers") {
    a.hw.v_layers = v;
  } else if (key == "gpu") {  // with --memory: each preset's compute with that memory
    a.hw.gpu = v;
  } else if (key == "gpus") {
    KVS_ASSIGN_OR_RETURN(a.gpus, parse_number<uint32_t>(key, v));
  } else if (key == "tp") {
    KVS_ASSIGN_OR_RETURN(a.hw.tp, parse_number<uint32_t>(key, v));
  } else if (key == "memory") {  // with --gpu: that preset's compute with each memory
    a.hw.memory = v;
  } else if (key == "gpu-memory-utilization") {
    KVS_ASSIGN_OR_RETURN(a.hw.utilization, parse_number<double>(key, v));
  } else if (key == "weights") {
    a.hw.weights = v;
  } else if (key == "weight-dtype") {
    a.hw.weight_dtype = v;
  } else if (key == "workspace") {
    a.hw.workspace = v;
  } else if (key == "kv-cache-memory") {
    a.kv_cache_memory = v;
  } else if (key == "block-size") {
    KVS_ASSIGN_OR_RETURN(a.block_size, parse_number<uint32_t>(key, v));
  } else if (key == "max-num-seqs") {
    KVS_ASSIGN_OR_RETURN(a.max_num_seqs, parse_number<uint32_t>(key, v));
  } else if (key == "max-num-batched-tokens") {
    KVS_ASSIGN_OR_RETURN(a.max_num_batched_tokens, parse_number<uint32_t>(key, v));
  } else if (key == "kv-recent-window") {
    KVS_ASSIGN_OR_RETURN(a.recent_window, parse_number<uint32_t>(key, v));
  } else if (key == "kv-recent-window-dtype") {
    a.recent_window_dtype = v;
  } else if (key == "kv-attention-sink") {
    KVS_ASSIGN_OR_RETURN(a.attention_sink, parse_on_off(key, v));
  } else if (key == "preemption-mode") {
    a.preemption_mode = v;
  } else if (key == "swap-space") {
    a.swap_space = v;
  } else if (key == "enable-prefix-caching" || key == "prefix-caching") {
    KVS_ASSIGN_OR_RETURN(a.enable_prefix_caching, parse_on_off(key, v));
  } else if (key == "max-model-len") {
    KVS_ASSIGN_OR_RETURN(a.max_model_len, parse_number<uint32_t>(key, v));
  } else if (key == "rate-scale") {
    KVS_ASSIGN_OR_RETURN(a.rate_scale, parse_number<double>(key, v));
  } else if (key == "arrival-jitter-ms") {
    KVS_ASSIGN_OR_RETURN(a.arrival_jitter_ms, parse_number<double>(key, v));
  } else if (key == "seed") {
    KVS_ASSIGN_OR_RETURN(a.seed, parse_number<uint64_t>(key, v));
  } else {
    std::string keys;
    for (const std::string& k : sim_setting_keys()) keys += (keys.empty() ? "" : ", ") + k;
    return invalid_argument("--sweep: unknown key '" + key + "' (one of " + keys + ")");
  }
  return Status::ok();
}

}  // namespace kvs
