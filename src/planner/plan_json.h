// plan_json: `kvserve plan --json`: the plan with exact byte counts (integers, never rounded),
// the inputs and where they came from, the other-unit reading and the levers.
#pragma once

#include <string>

#include "planner/plan_request.h"

namespace kvs {

[[nodiscard]] std::string render_plan_json(const PlanOutcome& outcome);

}  // namespace kvs
