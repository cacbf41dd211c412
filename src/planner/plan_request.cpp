#include "planner/plan_request.h"

#include <charconv>
#include <cmath>
#include <sstream>

#include "core/byte_size.h"

namespace kvs {

Result<std::pair<SizeInput, std::string>> default_weights(const PlannerModel& model,
                                                          const std::string& weight_dtype) {
  if (model.weight_bytes && weight_dtype.empty()) {
    return std::pair{
        size_from_bytes(*model.weight_bytes, UnitConvention::kBytes, ""),
        "GGUF tensor bytes (" + format_thousands(model.num_parameters) + " parameters as stored)"};
  }
  if (model.num_parameters == 0)
    return invalid_argument("the weights' size is unknown for " + model.name +
                            "; give --weights (e.g. --weights 16GB)");
  const std::string dtype = weight_dtype.empty() ? model.weight_dtype : weight_dtype;
  KVS_ASSIGN_OR_RETURN(double per_param, weight_dtype_bytes(dtype.empty() ? "bf16" : dtype));
  const auto bytes =
      static_cast<uint64_t>(std::llround(static_cast<double>(model.num_parameters) * per_param));
  std::ostringstream origin;
  origin << format_thousands(model.num_parameters) << " parameters"
         << (model.parameters_estimated ? " (estimated from the config)" : "") << " x " << per_param
         << " B (" << (dtype.empty() ? "bf16" : dtype) << ")";
  return std::pair{size_from_bytes(bytes, UnitConvention::kBytes, ""), origin.str()};
}

Result<std::vector<std::pair<uint64_t, double>>> parse_length_distribution(
    const std::string& text) {
  std::vector<std::pair<uint64_t, double>> out;
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    for (char& c : line)
      if (c == ',' || c == '\t' || c == ';') c = ' ';
    std::istringstream fields(line);
    std::string tok_s, weight_s, extra;
    if (!(fields >> tok_s)) continue;
    fields >> weight_s;
    const std::string where = "length distribution line " + std::to_string(line_no);
    if (fields >> extra) return invalid_argument(where + ": expected 'tokens [weight]'");
    const auto bad = [&] {
      return invalid_argument(where + ": '" + tok_s + (weight_s.empty() ? "" : " " + weight_s) +
                              "' is not 'tokens [weight]' with tokens > 0, weight >= 0");
    };
    uint64_t tokens = 0;
    double weight = 1;
    const auto [tok_end, tok_err] =
        std::from_chars(tok_s.data(), tok_s.data() + tok_s.size(), tokens);
    if (tok_err != std::errc() || tok_end != tok_s.data() + tok_s.size() || tokens == 0)
      return bad();
    if (!weight_s.empty()) {
      const auto [w_end, w_err] =
          std::from_chars(weight_s.data(), weight_s.data() + weight_s.size(), weight);
      if (w_err != std::errc() || w_end != weight_s.data() + weight_s.size() || !(weight >= 0) ||
          !std::isfinite(weight))
        return bad();
    }
    out.emplace_back(tokens, weight);
  }
  if (out.empty()) return invalid_argument("length distribution is empty");
  return out;
}

Result<PlanOutcome> run_plan(const PlanRequest& r) {
  PlanOutcome o;
  o.request = r;
  o.inputs.shape = r.model.kv_shape(r.k_dtype, r.v_dtype, r.tp);
  o.inputs.shape.layer_formats = r.layer_formats;
  // Each request the engine runs holds its window's rows (and the sink's) beside its blocks.
  o.inputs.shape.recent_window = r.engine_recent_window;
  o.inputs.shape.attention_sink = r.engine_attention_sink;
  o.inputs.shape.recent_window_dtype = r.engine_recent_window_dtype;
  o.inputs.gpu_memory_bytes = r.gpu_memory.bytes;
  o.inputs.gpu_memory_utilization = r.utilization;
  o.inputs.weights_bytes = r.weights.bytes;
  o.inputs.workspace_bytes = r.workspace.bytes;
  o.inputs.workload = r.workload;
  o.inputs.query_heads = r.model.num_attention_heads;
  auto plan = plan_capacity(o.inputs);
  if (!plan.is_ok()) return plan.status();
  o.plan = std::move(plan).value();
  const bool any_unit = r.gpu_memory.convention != UnitConvention::kBytes ||
                        r.weights.convention != UnitConvention::kBytes ||
                        r.workspace.convention != UnitConvention::kBytes;
  if (any_unit) {
    PlanInputs other = o.inputs;
    other.gpu_memory_bytes = r.gpu_memory.other_convention_bytes;
    other.weights_bytes = r.weights.other_convention_bytes;
    other.workspace_bytes = r.workspace.other_convention_bytes;
    auto p = plan_capacity(other);
    if (p.is_ok()) o.other_units = std::move(p).value();
  }
  o.levers = compute_levers(o.inputs, o.plan);
  std::optional<KvModelShape> engine_shape = r.engine_kv_shape;
  if (engine_shape) engine_shape->layer_formats = r.layer_formats;
  if (engine_shape) {
    auto unit = plan_kv_layout(*engine_shape, r.workload.block_size);
    if (unit.is_ok()) {
      o.engine_sequence = sequence_footprint(*unit, r.workload.context, r.engine_prefill_chunk);
      o.engine_sequence_windows = unit->groups.windows;
    }
  }
  if (r.kv_cache_memory) {
    if (!engine_shape) return invalid_argument("--kv-cache-memory needs a model the engine runs");
    auto pool = plan_kv_pool(*engine_shape, r.kv_cache_memory->bytes, r.workload.block_size,
                             r.engine_max_num_seqs, r.engine_recent_window, r.engine_attention_sink,
                             r.engine_recent_window_dtype);
    if (!pool.is_ok())
      return Status(pool.status().code(), "engine pool: " + pool.status().message());
    o.engine_pool = std::move(pool).value();
  }
  return o;
}

}  // namespace kvs
