// sim_report: what `kvserve simulate` prints: the summary table (setup, then results in virtual
// time), the --json document (exact counts, rates, percentiles, the time series) and the --sweep
// table (one row per combination of the swept settings).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "sim/simulation.h"

namespace kvs {

[[nodiscard]] std::string render_sim_report(const SimSetup& setup, const SimResult& result);

// `series_points`: buckets of the time series (0 = none).
[[nodiscard]] std::string render_sim_json(const SimSetup& setup, const SimResult& result,
                                          size_t series_points);

// One sweep row: the swept (key, value) pairs and the run's result.
struct SweepRow {
  std::vector<std::pair<std::string, std::string>> settings;
  SimSetup setup;
  SimResult result;
};
[[nodiscard]] std::string render_sweep_table(const std::vector<SweepRow>& rows);
[[nodiscard]] std::string render_sweep_json(const std::vector<SweepRow>& rows);

}  // namespace kvs
