// Small text helpers shared by the SVG charts (plan --svg, simulate --svg): number formatting,
// XML escaping and "nice" axis tick steps.
#pragma once

#include <string>

namespace kvs {

// v with one decimal ("12.5"): SVG coordinates.
[[nodiscard]] std::string svg_num(double v);
// s with <, >, & and " escaped for SVG text and attributes.
[[nodiscard]] std::string svg_escape(const std::string& s);
// A step of 1, 2, 2.5 or 5 x 10^k giving about `ticks` ticks over `range` (1 for an empty range).
[[nodiscard]] double svg_tick_step(double range, int ticks);

}  // namespace kvs
