// plan_hardware: the model and hardware of a plan as a command line types them (model, KV formats,
// tensor parallelism, GPU preset or memory, utilization, weights, workspace), resolved into a
// PlanRequest. `kvserve plan` and `kvserve simulate` share it, so the same flags mean the same
// bytes in both.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "planner/plan_request.h"

namespace kvs {

struct HardwareArgs {
  std::string model;  // catalog name, config.json, a directory holding one, or a GGUF
  std::string kv_dtype = "auto";
  std::string k_dtype;  // overrides kv_dtype for K when set
  std::string v_dtype;
  // --kv-cache-dtype-k-layers, --kv-cache-dtype-v-layers (quant/kv_layer_formats.h).
  std::string k_layers;
  std::string v_layers;
  uint32_t tp = 1;
  std::string gpu;     // preset name; "" = H100-80GB unless memory is given
  std::string memory;  // per GPU: "80GB", "75GiB"; with gpu, replaces the preset's memory
  double utilization = 0.9;
  std::string weights;  // the whole model; "" = from the catalog / GGUF
  std::string weight_dtype;
  std::string workspace = "0";
};

// "auto" is the model's activation dtype as an engine runs it (f16 for GGUF and f16 checkpoints,
// bf16 otherwise: float32 checkpoints run in 16 bits, vLLM's --dtype auto); any other name is a
// KV format (kv_format.h).
[[nodiscard]] Result<KvDtype> resolve_kv_dtype(const std::string& name, const PlannerModel& model);

// Loads the model and fills model, k/v dtypes (and per-layer formats), tp, GPU (name, note,
// memory), utilization, weights (with their origin) and workspace. Errors name the flag: "--memory:
// ...", "--tp must be ...".
[[nodiscard]] Result<PlanRequest> plan_request_from_hardware(const HardwareArgs& args);

}  // namespace kvs
