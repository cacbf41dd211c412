// sweep: `kvserve simulate --sweep KEY=V1,V2 [--sweep KEY2=...]`: every combination of the listed
// values (the first key varies slowest), each a list of (key, value) settings applied to the
// command's flags (sim_request.h apply_sim_setting) for one run. A per-layer format list holds
// commas itself (`18=int4_chan64,20=int4_chan64`), so the values of kv-cache-dtype-k-layers and
// kv-cache-dtype-v-layers are separated by ';' instead: `--sweep
// "kv-cache-dtype-k-layers=18=int4_chan64;18=int4_chan64,20=int4_chan64"` is two runs.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace kvs {

using SweepSettings = std::vector<std::pair<std::string, std::string>>;

// Parses each "KEY=V1,V2,..." ("KEY=V1;V2" for the layer lists; keys unique, values non-empty)
// and returns the combinations.
[[nodiscard]] Result<std::vector<SweepSettings>> expand_sweep(
    const std::vector<std::string>& specs);

}  // namespace kvs
