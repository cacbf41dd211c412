#include "planner/plan_levers.h"

#include <algorithm>

namespace kvs {
namespace {

bool is_at_most_byte(KvDtype d) {
  return kv_dtype_info(d).group_elems != 0 || kv_dtype_info(d).elem_bits <= 8;
}

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
  auto with_dtype = [&](const char* name, KvDtype d) {
    if (base.shape.k_dtype == d && base.shape.v_dtype == d)
      return not_applicable(name, std::string("already ") + kv_dtype_name(d));
    PlanInputs in = base;
    in.shape.k_dtype = in.shape.v_dtype = d;
    return from_plan(name, std::string("K and V ") + kv_dtype_name(d), in, plan_capacity(in),
                     false);
  };
  if (is_at_most_byte(base.shape.k_dtype) && is_at_most_byte(base.shape.v_dtype) &&
      !(base.shape.k_dtype == KvDtype::kFp8E4M3 && base.shape.v_dtype == KvDtype::kFp8E4M3))
    out.push_back(not_applicable("KV fp8 (e4m3)", "KV is already 8 bits or less"));
  else
    out.push_back(with_dtype("KV fp8 (e4m3)", KvDtype::kFp8E4M3));
  out.push_back(with_dtype("KV int4 (+f16 scale/32)", KvDtype::kInt4));

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
    in.workload.context = std::max<uint64_t>(1, base.workload.context / 2);
    if (in.workload.shared_prefix >= in.workload.context) in.workload.shared_prefix = 0;
    out.push_back(from_plan("half the context", "context " + std::to_string(in.workload.context),
                            in, plan_capacity(in), false));
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
