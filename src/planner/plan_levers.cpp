#include "planner/plan_levers.h"

#include "planner/kv_format_levers.h"

namespace kvs {
namespace {

Lever from_plan(std::string name, std::string change, const PlanInputs& in,
                const Result<CapacityPlan>& p, bool use_prefix) {
  Lever l;
  l.name = std::move(name);
  l.change = std::move(change);
  if (!p.is_ok()) {
    l.applicable = false;
    l.why_not = p.status().message();
    return l;
  }
  l.bytes_per_token = p->per_token.bytes_per_token;
  l.request_bytes = use_prefix ? p->request_unique_bytes : p->request_paged;
  l.c_max = use_prefix ? p->c_max_with_prefix : p->c_max_worst;
  l.fits = l.c_max >= in.workload.concurrency.value_or(1);
  return l;
}

Lever not_applicable(std::string name, std::string why) {
  Lever l;
  l.name = std::move(name);
  l.applicable = false;
  l.why_not = std::move(why);
  return l;
}

}  // namespace

std::vector<Lever> compute_levers(const PlanInputs& base, const CapacityPlan& base_plan) {
  std::vector<Lever> out;
  {
    Lever l;
    l.name = "as planned";
    l.change = std::string("K ") + kv_dtype_name(base.shape.k_dtype) + ", V " +
               kv_dtype_name(base.shape.v_dtype) + ", context " +
               std::to_string(base.workload.context) + ", tp " + std::to_string(base.shape.tp);
    l.bytes_per_token = base_plan.per_token.bytes_per_token;
    l.request_bytes = base_plan.request_paged;
    l.c_max = base_plan.c_max_worst;
    l.fits = l.c_max >= base.workload.concurrency.value_or(1);
    out.push_back(l);
  }
  // The KV-format levers (kv_format_levers.h: which apply, the dashboard offers the same).
  for (const KvFormatLever& f :
       kv_format_levers(base.shape.k_dtype, base.shape.v_dtype, base.workload.block_size)) {
    if (!f.why_not.empty()) {
      out.push_back(not_applicable(f.name, f.why_not));
      continue;
    }
    PlanInputs in = base;
    in.shape.k_dtype = f.k_dtype;
    in.shape.v_dtype = f.v_dtype;
    const std::string change =
        f.k_dtype == f.v_dtype
            ? std::string("K and V ") + kv_dtype_name(f.k_dtype)
            : std::string("K ") + kv_dtype_name(f.k_dtype) + ", V " + kv_dtype_name(f.v_dtype);
    out.push_back(from_plan(f.name, change, in, plan_capacity(in), false));
  }

  // Fewer KV heads: what a model with half the KV heads (more query heads per KV head) would
  // need. A model property, so this is a design lever, not a serving flag.
  {
    PlanInputs in = base;
    bool changed = false;
    for (KvLayer& l : in.shape.layers) {
      if ((l.kind == KvLayerKind::kFull || l.kind == KvLayerKind::kSliding) && l.kv_heads > 1) {
        l.kv_heads /= 2;
        changed = true;
      }
    }
    if (!changed)
      out.push_back(not_applicable(
          "half the KV heads", "no layer has more than one KV head (MLA latents have no heads)"));
    else
      out.push_back(from_plan("half the KV heads", "KV heads / 2 (a model change: GQA/MQA)", in,
                              plan_capacity(in), false));
  }
  {
    PlanInputs in = base;
    in.workload.context = half_context(base.workload.context);
    if (in.workload.shared_prefix >= in.workload.context) in.workload.shared_prefix = 0;
    out.push_back(from_plan(kHalfContextLever, "context " + std::to_string(in.workload.context), in,
                            plan_capacity(in), false));
  }
  {
    PlanInputs in = base;
    in.shape.tp = base.shape.tp * 2;
    out.push_back(from_plan("more memory: 2x GPUs (tp " + std::to_string(in.shape.tp) + ")",
                            "weights and KV heads split over twice the GPUs", in, plan_capacity(in),
                            false));
  }
  {
    PlanInputs in = base;
    std::string name = "prefix sharing";
    if (in.workload.shared_prefix == 0) {
      // Not asked for: show what a shared prompt of a quarter of the context would buy.
      in.workload.shared_prefix = base.workload.context / 4;
      name += " (assumed 1/4 of context)";
    }
    if (in.workload.shared_prefix == 0)
      out.push_back(not_applicable(name, "context too short"));
    else
      out.push_back(
          from_plan(name, std::to_string(in.workload.shared_prefix) + " tokens shared, stored once",
                    in, plan_capacity(in), true));
  }
  return out;
}

}  // namespace kvs
