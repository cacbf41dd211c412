// sim_svg: `kvserve simulate --svg FILE`: the run over (virtual) time in three stacked panels:
// running and waiting requests; the KV pool's blocks in use and kept only as prefix cache; and
// preemptions per interval. Hand-written SVG, like the planner's chart (plan_svg.h).
#pragma once

#include <string>

#include "sim/simulation.h"

namespace kvs {

// A standalone SVG document (no scripts, no external references).
[[nodiscard]] std::string render_sim_svg(const SimSetup& setup, const SimResult& result);

}  // namespace kvs
