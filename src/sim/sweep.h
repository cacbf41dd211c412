// sweep: `kvserve simulate --sweep KEY=V1,V2 [--sweep KEY2=...]`: every combination of the listed
// values (the first key varies slowest), each a list of (key, value) settings applied to the
// command's flags (sim_request.h apply_sim_setting) for one run.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace kvs {

using SweepSettings = std::vector<std::pair<std::string, std::string>>;

// Parses each "KEY=V1,V2,..." (keys unique, values non-empty) and returns the combinations.
[[nodiscard]] Result<std::vector<SweepSettings>> expand_sweep(
    const std::vector<std::string>& specs);

}  // namespace kvs
