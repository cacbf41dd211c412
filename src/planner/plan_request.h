// plan_request: everything `kvserve plan` was asked (model, KV formats, GPU, weights, workload),
// with the provenance of each number, and run_plan() which turns it into the capacity plan, the
// same plan with the sizes read in the other unit convention, and the levers.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "kvcache/kv_pool_plan.h"
#include "model/model_spec.h"
#include "planner/capacity_plan.h"
#include "planner/model_config.h"
#include "planner/plan_levers.h"
#include "planner/size_input.h"

namespace kvs {

struct PlanRequest {
  PlannerModel model;
  KvDtype k_dtype = KvDtype::kBF16;
  KvDtype v_dtype = KvDtype::kBF16;
  // Layers whose K or V has its own format (quant/kv_layer_formats.h), in the capacity plan and
  // the engine's pool alike.
  KvLayerFormats layer_formats;
  uint32_t tp = 1;
  std::string gpu_name;  // the preset, or "" for --memory
  std::string gpu_note;  // the preset's note
  SizeInput gpu_memory;  // per GPU
  // --gpu and --memory together: the preset's compute and bandwidth, this memory instead of the
  // preset's (gpu_preset_memory_bytes, kept to say what was replaced).
  bool gpu_memory_overridden = false;
  uint64_t gpu_preset_memory_bytes = 0;
  double utilization = 0.9;
  SizeInput weights;           // the whole model
  std::string weights_origin;  // "8,030,261,248 parameters x 2 B (bf16, catalog)"
  SizeInput workspace;         // per GPU
  PlanWorkload workload;
  std::string length_distribution_origin;  // the file, when one was given
  // --kv-cache-memory: also size the engine's pool for this budget (kvcache/kv_pool_plan.h,
  // the engine's own sizing), for the KV shape the engine would run (engine_kv_shape; run_plan
  // gives it layer_formats).
  std::optional<SizeInput> kv_cache_memory;
  std::optional<KvModelShape> engine_kv_shape;
  // The engine's prefill chunk (max_num_batched_tokens), for the per-sequence footprint.
  uint32_t engine_prefill_chunk = 512;
  // The engine's --max-num-seqs: per-channel K formats hold one f16 key tail per sequence
  // (kv_pool_plan.h), taken from --kv-cache-memory before the blocks.
  uint32_t engine_max_num_seqs = 64;
  // The engine's --kv-recent-window (quant/recent_window.h): its f16 rings, one per sequence,
  // counted in every request of the capacity (KvModelShape::recent_window) and taken from
  // --kv-cache-memory before the blocks.
  uint32_t engine_recent_window = 0;
  KvDtype engine_recent_window_dtype = KvDtype::kF16;  // its rows (--kv-recent-window-dtype)
  // The engine's --kv-attention-sink (quant/attention_sink.h): its rows, counted with the window's.
  bool engine_attention_sink = false;
};

struct PlanOutcome {
  PlanRequest request;
  PlanInputs inputs;
  CapacityPlan plan;
  // The same plan with every typed size read in the other convention (GB <-> GiB); absent when
  // no size carried a unit or the reading changes nothing.
  std::optional<CapacityPlan> other_units;
  std::vector<Lever> levers;
  std::optional<KvPoolPlan> engine_pool;  // when kv_cache_memory and engine_kv_shape are set
  // What one sequence of the workload's context holds in the engine's pool at its peak (blocks
  // per layer group, chunk slack included); when engine_kv_shape is set.
  std::optional<KvSequenceFootprint> engine_sequence;
  std::vector<uint32_t> engine_sequence_windows;  // its groups' windows (0 = full)
};

[[nodiscard]] Result<PlanOutcome> run_plan(const PlanRequest& request);

// The weights of `model` when the user gave none: exact GGUF tensor bytes, else parameters x
// bytes per parameter of `weight_dtype` (the model's own dtype when empty). Sets the origin text.
[[nodiscard]] Result<std::pair<SizeInput, std::string>> default_weights(
    const PlannerModel& model, const std::string& weight_dtype);

// A length distribution: one "tokens [weight]" pair per line (comma or spaces), '#' comments,
// weight 1 when omitted.
[[nodiscard]] Result<std::vector<std::pair<uint64_t, double>>> parse_length_distribution(
    const std::string& text);

}  // namespace kvs
