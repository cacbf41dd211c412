#include "planner/plan_hardware.h"

#include <optional>

#include "planner/catalog.h"
#include "planner/gpu_presets.h"
#include "planner/plan_report.h"

namespace kvs {

namespace {
// Prefixes a failure with the flag it came from.
Status with_flag(const Status& s, const std::string& flag) {
  return Status(s.code(), flag + s.message());
}
}  // namespace

Result<KvDtype> resolve_kv_dtype(const std::string& name, const PlannerModel& model) {
  if (name == "auto") {
    // The model's activation dtype: what an engine stores KV in by default. A float32 checkpoint
    // runs in 16 bits (vLLM's --dtype auto picks bfloat16 for it), so its KV is bf16 too.
    if (model.weight_dtype == "f16" || model.weight_dtype == "gguf") return KvDtype::kF16;
    return KvDtype::kBF16;
  }
  auto d = parse_kv_dtype(name);
  if (!d.is_ok()) return with_flag(d.status(), "--kv-dtype: ");
  return *d;
}

Result<PlanRequest> plan_request_from_hardware(const HardwareArgs& a) {
  PlanRequest r;
  auto model = load_planner_model(a.model);
  if (!model.is_ok()) return with_flag(model.status(), "--model: ");
  r.model = std::move(model).value();
  KVS_ASSIGN_OR_RETURN(r.k_dtype,
                       resolve_kv_dtype(a.k_dtype.empty() ? a.kv_dtype : a.k_dtype, r.model));
  KVS_ASSIGN_OR_RETURN(r.v_dtype,
                       resolve_kv_dtype(a.v_dtype.empty() ? a.kv_dtype : a.v_dtype, r.model));
  KVS_ASSIGN_OR_RETURN(r.layer_formats, parse_kv_layer_flags(a.k_layers, a.v_layers));
  if (a.tp == 0) return invalid_argument("--tp must be at least 1");
  r.tp = a.tp;

  // --memory alone: that memory, no preset. --gpu alone (or neither): the preset. Both: the
  // preset's compute and bandwidth with the given memory instead of the preset's.
  std::optional<SizeInput> memory;
  if (!a.memory.empty()) {
    auto mem = parse_size_input(a.memory);
    if (!mem.is_ok()) return with_flag(mem.status(), "--memory: ");
    if (mem->bytes == 0) return invalid_argument("--memory: must be more than 0 bytes");
    memory = *mem;
  }
  if (memory.has_value() && a.gpu.empty()) {
    r.gpu_memory = *memory;
  } else {
    auto g = find_gpu_preset(a.gpu.empty() ? "H100-80GB" : a.gpu);
    if (!g.is_ok()) return with_flag(g.status(), "--gpu: ");
    r.gpu_name = g->name;
    r.gpu_preset_memory_bytes = g->memory_bytes;
    if (memory.has_value()) {
      r.gpu_memory = *memory;
      r.gpu_memory_overridden = true;
      r.gpu_note = "the preset's compute and bandwidth with this memory instead of its " +
                   bytes_both_units(g->memory_bytes);
    } else {
      r.gpu_note = std::string(g->note) + (a.gpu.empty() ? "; the default, choose with --gpu" : "");
      // The preset's unit is stated in its note; only typed sizes get the other-unit reading.
      r.gpu_memory = size_from_bytes(g->memory_bytes, UnitConvention::kBytes, "");
    }
  }
  if (!(a.utilization > 0 && a.utilization <= 1))
    return invalid_argument("--gpu-memory-utilization must be in (0, 1]");
  r.utilization = a.utilization;
  if (!a.weights.empty()) {
    auto w = parse_size_input(a.weights);
    if (!w.is_ok()) return with_flag(w.status(), "--weights: ");
    r.weights = *w;
    r.weights_origin = "--weights";
  } else {
    KVS_ASSIGN_OR_RETURN(auto size_origin, default_weights(r.model, a.weight_dtype));
    r.weights = size_origin.first;
    r.weights_origin = size_origin.second;
  }
  auto ws = parse_size_input(a.workspace);
  if (!ws.is_ok()) return with_flag(ws.status(), "--workspace: ");
  r.workspace = *ws;
  return r;
}

}  // namespace kvs
