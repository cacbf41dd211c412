#include "planner/plan_json.h"

#include <nlohmann/json.hpp>

namespace kvs {
namespace {

using nlohmann::json;

const char* kind_key(int k) {
  switch (static_cast<KvLayerKind>(k)) {
    case KvLayerKind::kFull: return "full_attention";
    case KvLayerKind::kSliding: return "sliding_window";
    case KvLayerKind::kMla: return "mla_latent";
    case KvLayerKind::kNoKv: return "linear_state";
  }
  return "unknown";
}

json size_json(const SizeInput& s) {
  json j = {{"bytes", s.bytes}, {"unit_convention", unit_convention_name(s.convention)}};
  if (!s.text.empty()) j["as_given"] = s.text;
  return j;
}

json capacity_json(const CapacityPlan& p) {
  json j;
  j["usable_bytes"] = p.usable_bytes;
  j["weights_per_gpu_bytes"] = p.weights_per_gpu;
  j["kv_budget_bytes"] = p.kv_budget;
  j["kv_budget_signed_bytes"] = p.kv_budget_signed;
  j["c_max_worst"] = p.c_max_worst;
  j["c_max_worst_exact"] = p.c_max_worst_exact;
  j["c_max_contiguous"] = p.c_max_contiguous;
  return j;
}

}  // namespace

std::string render_plan_json(const PlanOutcome& out) {
  const PlanRequest& r = out.request;
  const CapacityPlan& p = out.plan;
  json j;
  j["model"] = {{"name", r.model.name},
                {"display_name", r.model.display_name},
                {"source", r.model.source},
                {"architecture", r.model.architecture},
                {"layers", r.model.layer_count()},
                {"num_attention_heads", r.model.num_attention_heads},
                {"kv_heads", r.model.kv_heads()},
                {"num_experts", r.model.num_experts},
                {"num_parameters", r.model.num_parameters},
                {"parameters_estimated", r.model.parameters_estimated}};
  j["kv_format"] = {{"k", kv_dtype_name(r.k_dtype)},
                    {"v", kv_dtype_name(r.v_dtype)},
                    {"k_layers", kv_layer_formats_text(r.layer_formats, 'k')},
                    {"v_layers", kv_layer_formats_text(r.layer_formats, 'v')}};
  j["tp"] = r.tp;
  j["units"] = {{"GB", 1000000000}, {"GiB", 1073741824}};
  json per_token = {{"bytes", p.per_token.bytes_per_token},
                    {"formula", p.per_token.formula},
                    {"state_bytes_per_sequence", p.per_token.state_bytes_per_sequence},
                    {"row_bytes_per_sequence", p.per_token.rows_per_sequence.total()}};
  json by_kind = json::object();
  json req_kind = json::object();
  for (int k = 0; k < kNumKvLayerKinds; ++k) {
    if (p.per_token.layers_by_kind[k] == 0) continue;
    by_kind[kind_key(k)] = {{"layers", p.per_token.layers_by_kind[k]},
                            {"bytes_per_token", p.per_token.token_bytes_by_kind[k]}};
    req_kind[kind_key(k)] = p.request.by_kind[k];
  }
  per_token["by_layer_kind"] = by_kind;
  // The same in the model's terms (layer_role.h): Mamba1/Mamba2/lightning/KV-shared layers by
  // name, each with its layers, bytes per token, fixed state and bytes at the context.
  json by_role = json::object();
  for (const LayerRoleBytes& b :
       layer_role_breakdown(r.model.layer_roles(), out.inputs.shape, r.workload.context,
                            r.workload.window_chunk_tokens))
    by_role[layer_role_key(b.role)] = {{"layers", b.layers},
                                       {"bytes_per_token", b.bytes_per_token},
                                       {"state_bytes_per_sequence", b.state_bytes},
                                       {"request_bytes", b.request_bytes}};
  per_token["by_layer_role"] = by_role;
  j["per_token"] = per_token;
  j["per_request"] = {{"context_tokens", r.workload.context},
                      {"bytes", p.request.total},
                      {"paged_bytes", p.request_paged},
                      {"block_size", r.workload.block_size},
                      {"by_layer_kind", req_kind}};
  if (r.workload.window_chunk_tokens > 0)  // windowed layers held as during a step of this many
    j["per_request"]["window_step_tokens"] = r.workload.window_chunk_tokens;
  j["memory"] = {{"gpu", r.gpu_name},
                 {"gpu_memory", size_json(r.gpu_memory)},
                 {"gpu_memory_overridden", r.gpu_memory_overridden},
                 {"gpu_memory_utilization", r.utilization},
                 {"weights", size_json(r.weights)},
                 {"weights_origin", r.weights_origin},
                 {"workspace", size_json(r.workspace)},
                 {"total_gpu_memory_bytes", p.total_gpu_memory},
                 {"total_kv_budget_bytes", p.total_kv_budget}};
  j["capacity"] = capacity_json(p);
  if (p.has_expected)
    j["capacity"]["expected"] = {{"mean_tokens", p.expected_tokens},
                                 {"request_bytes_exact", p.expected_request_exact},
                                 {"request_bytes_paged", p.expected_request_paged},
                                 {"c_max", p.c_max_expected},
                                 {"paging_waste_bytes", p.paging_waste_per_request},
                                 {"contiguous_waste_bytes", p.contiguous_waste_per_request}};
  if (p.has_prefix)
    j["capacity"]["prefix_sharing"] = {{"shared_tokens", p.shared_prefix_tokens},
                                       {"prefix_bytes", p.prefix_bytes},
                                       {"request_unique_bytes", p.request_unique_bytes},
                                       {"c_max", p.c_max_with_prefix},
                                       {"freed_bytes", p.prefix_freed_bytes}};
  json verdict = {{"fits", p.fits},
                  {"max_context_tokens", p.max_context},
                  {"context_unbounded", p.context_unbounded}};
  if (p.has_concurrency) {
    verdict["concurrency"] = p.concurrency;
    verdict["total_bytes"] = p.total_at_concurrency;
  }
  j["verdict"] = verdict;
  if (out.other_units) j["other_unit_convention"] = capacity_json(*out.other_units);
  json levers = json::array();
  for (const Lever& l : out.levers) {
    json e = {{"name", l.name}, {"applicable", l.applicable}};
    if (l.applicable) {
      e["change"] = l.change;
      e["bytes_per_token"] = l.bytes_per_token;
      e["request_bytes"] = l.request_bytes;
      e["c_max"] = l.c_max;
      e["fits"] = l.fits;
    } else {
      e["why_not"] = l.why_not;
    }
    levers.push_back(e);
  }
  j["levers"] = levers;
  if (out.engine_pool)
    j["engine_pool"] = {
        {"kv_cache_memory_bytes", r.kv_cache_memory->bytes},
        {"block_size", r.workload.block_size},
        {"bytes_per_token", out.engine_pool->bytes_per_token},
        {"formula", out.engine_pool->formula},
        {"block_bytes", out.engine_pool->block_bytes},
        {"num_blocks", out.engine_pool->num_blocks},
        {"num_tokens", out.engine_pool->num_tokens},
        {"pool_bytes", out.engine_pool->pool_bytes},
        {"key_tail_slots", out.engine_pool->key_tail_slots},
        {"key_tail_bytes", out.engine_pool->key_tail_bytes},
        {"recent_window", out.engine_pool->recent_window},
        {"recent_window_slots", out.engine_pool->recent_window_slots},
        {"recent_window_bytes", out.engine_pool->recent_window_bytes},
        {"recent_window_dtype", kv_dtype_name(out.engine_pool->recent_window_dtype)},
        {"attention_sink", out.engine_pool->attention_sink}};
  if (out.engine_sequence) {
    const KvSequenceFootprint& q = *out.engine_sequence;
    j["engine_sequence"] = {{"tokens", q.tokens},
                            {"block_size", r.workload.block_size},
                            {"prefill_chunk", q.prefill_chunk},
                            {"group_windows", out.engine_sequence_windows},
                            {"group_blocks", q.group_blocks},
                            {"blocks", q.blocks},
                            {"peak_kv_bytes", q.bytes},
                            {"all_layers_full_bytes", q.all_full_bytes}};
  }
  return j.dump(2) + "\n";
}

}  // namespace kvs
