// plan_svg: `kvserve plan --svg FILE`: memory of one GPU against concurrency. Weights and
// workspace are a fixed floor; the KV cache grows by one request's bytes per concurrent request
// on top of it, a second model in memory, until it crosses the usable-memory line at C_max.
#pragma once

#include <string>

#include "planner/plan_request.h"

namespace kvs {

// A standalone SVG document (no scripts, no external references).
[[nodiscard]] std::string render_plan_svg(const PlanOutcome& outcome);

}  // namespace kvs
