// plan_levers: what each lever buys. Each lever changes one thing in the plan's inputs (the KV
// format, the KV heads, the context, the GPU count, prefix sharing) and re-plans, so the table
// shows bytes per token, bytes per request and C_max side by side with the plan as given.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/capacity_plan.h"

namespace kvs {

struct Lever {
  std::string name;    // "KV fp8 (e4m3)"
  std::string change;  // what was changed: "K fp8_e4m3, V fp8_e4m3"
  bool applicable = true;
  std::string why_not;  // when !applicable: "already fp8", "MLA has no KV heads"
  uint64_t bytes_per_token = 0;
  uint64_t request_bytes = 0;  // paged, at the lever's context
  uint64_t c_max = 0;          // worst case (prefix lever: with sharing)
  bool fits = false;           // at the requested concurrency (or >= 1 request)
};

// The first entry is the plan as given ("as planned"). `base_plan` is plan_capacity(base).
[[nodiscard]] std::vector<Lever> compute_levers(const PlanInputs& base,
                                                const CapacityPlan& base_plan);

}  // namespace kvs
