// plan_report: the human-readable `kvserve plan` report. Every computed size is printed as
// exact bytes plus both conventions ("1,073,741,824 B = 1.00 GiB = 1.07 GB"); sizes the user typed
// keep their unit. Sections: model, formula with the model's numbers, bytes per token by layer
// kind, per request, memory, capacity (worst / expected / contiguous vs paged / prefix), verdict,
// unit conventions, levers.
#pragma once

#include <cstdint>
#include <string>

#include "planner/plan_request.h"

namespace kvs {

// "1,073,741,824 B = 1.00 GiB = 1.07 GB"
[[nodiscard]] std::string bytes_both_units(uint64_t bytes);
[[nodiscard]] std::string bytes_both_units(double bytes);

[[nodiscard]] std::string render_plan_report(const PlanOutcome& outcome);

// The one-paragraph explanation of why the same inputs read as GB and as GiB give different
// C_max values (empty when outcome.other_units is absent or equal).
[[nodiscard]] std::string unit_convention_note(const PlanOutcome& outcome);

}  // namespace kvs
