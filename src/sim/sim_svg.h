// sim_svg: `kvserve simulate --svg FILE`: the run over (virtual) time in four stacked panels:
// running requests (against max-num-seqs), waiting requests, the KV pool's blocks in use and kept
// only as prefix cache, and preemptions per interval by mode. 300 intervals (time_series).
// Hand-written SVG, like the planner's chart (plan_svg.h); elements carry a class per series.
#pragma once

#include <string>

#include "sim/simulation.h"

namespace kvs {

// A standalone SVG document (no scripts, no external references).
[[nodiscard]] std::string render_sim_svg(const SimSetup& setup, const SimResult& result);

}  // namespace kvs
