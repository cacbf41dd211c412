// sim_request: what `kvserve simulate` was asked (SimArgs, the flags as typed) and its resolution
// into everything a run needs (SimSetup): the model and memory exactly as `kvserve plan` reads
// them (plan_hardware.h), the KV pool per rank through kvcache's plan_kv_pool (the engine's own
// sizing), the step-time model's costs and device, and the scheduler's configuration.
//
// Pool per rank: --kv-cache-memory when given (as `kvserve serve`), else the planner's KV budget
// floor(memory x utilization) - ceil(weights / tp) - workspace. Ranks of a replica hold
// max(1, kv_heads / tp) heads each, so a block of block_size tokens costs the same on each and
// the replica has the pool's num_blocks. Models the engine cannot run (sliding windows, MLA,
// linear attention) are refused: their pool is not a pool of uniform blocks.
//
// Replicas: --gpus / --tp engine replicas (data parallel), requests assigned round robin in
// arrival order.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/scheduler.h"
#include "kvcache/kv_pool_plan.h"
#include "planner/plan_hardware.h"
#include "sim/step_time_model.h"

namespace kvs {

struct SimArgs {
  HardwareArgs hw;
  uint32_t gpus = 0;            // all GPUs; 0 = tp (one replica)
  std::string device = "gpu";   // "gpu": the --gpu preset's roofline; "cpu": the calibrated CPU
  std::string device_file;      // cpu constants; "" = <data dir>/devices/cpu.json
  std::string kv_cache_memory;  // the pool per rank instead of the GPU memory model
  uint32_t block_size = 16;
  uint32_t max_num_seqs = 0;            // 0 = the device's default (gpu 256, cpu 64)
  uint32_t max_num_batched_tokens = 0;  // 0 = the device's default (gpu 8192, cpu 512)
  // The engine's --kv-recent-window (tokens, 0 = none): its rings come out of the pool's budget
  // and prefix hits stop at each sequence's window floor, as in the engine.
  uint32_t recent_window = 0;
  std::string recent_window_dtype = "f16";  // the engine's --kv-recent-window-dtype
  // The engine's --kv-attention-sink: its rows come out of the budget with the window's, and the
  // scheduler refuses a prefix hit whose first token the sink's table forgot, as in the engine
  // (kvcache/start_token_table.h).
  bool attention_sink = false;
  std::string preemption_mode = "recompute";
  std::string swap_space = "0";  // host bytes per replica for swapped-out blocks
  bool enable_prefix_caching = true;
  uint32_t max_model_len = 0;  // 0 = the model's context length
  uint32_t vocab_size = 0;     // bound of synthesized token ids; 0 = the model's (or 128,256)
  double rate_scale = 1;       // arrivals / rate_scale
  // Each arrival delayed by a draw of [0, arrival_jitter_ms) ms (seeded by `seed`), then the
  // trace re-sorted: requests a trace stamps with one time reach a real server a few ms apart,
  // in an order that changes from run to run (docs/simulate.md). 0 = the trace's times.
  double arrival_jitter_ms = 0;
  uint64_t seed = 0;
};

struct SimSetup {
  SimArgs args;
  PlanRequest plan;                   // model, formats, GPU, weights, workspace
  std::optional<uint64_t> kv_budget;  // the planner's budget per rank (GPU memory model)
  std::string pool_origin;            // "--kv-cache-memory 512MiB" or the budget formula
  KvPoolPlan pool;                    // per rank
  ModelCost cost;
  DeviceModel device;
  SchedulerConfig scheduler;
  bool enable_prefix_caching = true;
  uint32_t tp = 1;
  uint32_t replicas = 1;
  uint32_t host_blocks = 0;
  uint32_t max_model_len = 0;
  uint32_t vocab_size = 0;
};

[[nodiscard]] Result<SimSetup> resolve_sim(const SimArgs& args);

// `--sweep KEY=V1,V2`: sets one flag of args by its name (without "--"). Keys:
// sim_setting_keys().
[[nodiscard]] Status apply_sim_setting(SimArgs& args, const std::string& key,
                                       const std::string& value);
[[nodiscard]] std::vector<std::string> sim_setting_keys();

}  // namespace kvs
