#include "planner/plan_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "planner/svg_text.h"

namespace kvs {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;
constexpr double kW = 820, kH = 440;
constexpr double kLeft = 70, kRight = 250, kTop = 50, kBottom = 60;

}  // namespace

std::string render_plan_svg(const PlanOutcome& out) {
  const CapacityPlan& p = out.plan;
  const PlanRequest& r = out.request;
  const double floor_bytes = static_cast<double>(p.weights_per_gpu + r.workspace.bytes);
  const double req = static_cast<double>(std::max<uint64_t>(1, p.request_paged));
  const double gpu = static_cast<double>(r.gpu_memory.bytes);
  const double usable = static_cast<double>(p.usable_bytes);
  const double want = p.has_concurrency ? static_cast<double>(p.concurrency) : 0;
  const double x_max =
      std::max({4.0, std::ceil(p.c_max_worst_exact * 1.3), std::ceil(want * 1.15)});
  // The y axis shows the whole GPU and as much of the KV wedge as fits in 1.5x of it.
  const double y_max = std::max(gpu * 1.08, std::min(floor_bytes + x_max * req, gpu * 1.5)) / kGiB;
  const double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom;
  auto X = [&](double c) { return kLeft + c / x_max * pw; };
  auto Y = [&](double gib) { return kTop + ph - std::min(gib, y_max) / y_max * ph; };

  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kW << "\" height=\"" << kH
    << "\" viewBox=\"0 0 " << kW << " " << kH
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s << "<text x=\"" << kLeft << "\" y=\"22\" font-size=\"15\" font-weight=\"bold\">"
    << svg_escape(r.model.display_name) << ": GPU memory vs concurrency</text>\n";
  s << "<text x=\"" << kLeft << "\" y=\"40\" fill=\"#555\">" << svg_escape(p.per_token.formula)
    << " per token; " << r.workload.context << " tokens per request; per GPU"
    << (r.tp > 1 ? " (tp " + std::to_string(r.tp) + ")" : "") << "</text>\n";

  // Axes and grid.
  const double ystep = svg_tick_step(y_max, 6);
  for (double g = 0; g <= y_max + 1e-9; g += ystep) {
    s << "<line x1=\"" << kLeft << "\" x2=\"" << kLeft + pw << "\" y1=\"" << svg_num(Y(g))
      << "\" y2=\"" << svg_num(Y(g)) << "\" stroke=\"#eee\"/>\n";
    s << "<text x=\"" << kLeft - 6 << "\" y=\"" << svg_num(Y(g) + 4) << "\" text-anchor=\"end\">"
      << svg_num(g) << "</text>\n";
  }
  const double xstep = std::max(1.0, std::round(svg_tick_step(x_max, 8)));
  for (double c = 0; c <= x_max + 1e-9; c += xstep)
    s << "<text x=\"" << svg_num(X(c)) << "\" y=\"" << kTop + ph + 18
      << "\" text-anchor=\"middle\">" << c << "</text>\n";
  s << "<line x1=\"" << kLeft << "\" y1=\"" << kTop + ph << "\" x2=\"" << kLeft + pw << "\" y2=\""
    << kTop + ph << "\" stroke=\"black\"/>\n";
  s << "<line x1=\"" << kLeft << "\" y1=\"" << kTop << "\" x2=\"" << kLeft << "\" y2=\""
    << kTop + ph << "\" stroke=\"black\"/>\n";
  s << "<text x=\"" << kLeft + pw / 2 << "\" y=\"" << kH - 18
    << "\" text-anchor=\"middle\">concurrent requests</text>\n";
  s << "<text transform=\"translate(18," << kTop + ph / 2
    << ") rotate(-90)\" text-anchor=\"middle\">memory per GPU (GiB = 2^30 B)</text>\n";

  // Weights + workspace floor, KV wedge on top of it.
  const double fl = floor_bytes / kGiB;
  // Where the KV line leaves the plot (it is clipped at the top).
  const double x_end = std::min(x_max, (y_max * kGiB - floor_bytes) / req);
  const double top = (floor_bytes + x_end * req) / kGiB;
  s << "<rect x=\"" << kLeft << "\" y=\"" << svg_num(Y(fl)) << "\" width=\"" << pw << "\" height=\""
    << svg_num(Y(0) - Y(fl)) << "\" fill=\"#9ecae1\"/>\n";
  s << "<polygon points=\"" << svg_num(X(0)) << "," << svg_num(Y(fl)) << " " << svg_num(X(x_max))
    << "," << svg_num(Y(fl)) << " " << svg_num(X(x_max)) << ","
    << svg_num(Y(x_end < x_max ? y_max : top)) << " " << svg_num(X(x_end)) << "," << svg_num(Y(top))
    << "\" fill=\"#fdae6b\" fill-opacity=\"0.8\"/>\n";
  s << "<line x1=\"" << svg_num(X(0)) << "\" y1=\"" << svg_num(Y(fl)) << "\" x2=\""
    << svg_num(X(x_end)) << "\" y2=\"" << svg_num(Y(top))
    << "\" stroke=\"#e6550d\" stroke-width=\"2\"/>\n";
  // Usable and physical memory lines.
  s << "<line x1=\"" << kLeft << "\" x2=\"" << kLeft + pw << "\" y1=\"" << svg_num(Y(usable / kGiB))
    << "\" y2=\"" << svg_num(Y(usable / kGiB)) << "\" stroke=\"#d62728\" stroke-width=\"2\"/>\n";
  s << "<line x1=\"" << kLeft << "\" x2=\"" << kLeft + pw << "\" y1=\"" << svg_num(Y(gpu / kGiB))
    << "\" y2=\"" << svg_num(Y(gpu / kGiB)) << "\" stroke=\"#333\" stroke-dasharray=\"6,4\"/>\n";
  // C_max marker and the requested concurrency.
  const double cx = X(static_cast<double>(p.c_max_worst));
  s << "<line x1=\"" << svg_num(cx) << "\" x2=\"" << svg_num(cx) << "\" y1=\"" << kTop << "\" y2=\""
    << kTop + ph << "\" stroke=\"#2ca02c\" stroke-dasharray=\"3,3\"/>\n";
  s << "<text x=\"" << svg_num(cx + 4) << "\" y=\"" << kTop + 12
    << "\" fill=\"#2ca02c\">C_max = " << p.c_max_worst << "</text>\n";
  if (p.has_concurrency) {
    const double y = (floor_bytes + want * req) / kGiB;
    s << "<circle cx=\"" << svg_num(X(want)) << "\" cy=\"" << svg_num(Y(y)) << "\" r=\"5\" fill=\""
      << (p.fits ? "#2ca02c" : "#d62728") << "\"/>\n";
    s << "<text x=\"" << svg_num(X(want) + 7) << "\" y=\"" << svg_num(Y(y) - 7) << "\">"
      << p.concurrency << " requests: " << (p.fits ? "fits" : "does not fit") << "</text>\n";
  }
  // Legend.
  const double lx = kLeft + pw + 14;
  struct Item {
    const char* color;
    std::string label;
  };
  const Item items[] = {
      {"#9ecae1", "weights + workspace"},
      {"#fdae6b", "KV cache (grows per request)"},
      {"#d62728", "usable (" + svg_num(r.utilization * 100) + "%)"},
      {"#333", "GPU memory"},
      {"#2ca02c", "C_max (worst case)"},
  };
  double ly = kTop + 10;
  for (const Item& it : items) {
    s << "<rect x=\"" << lx << "\" y=\"" << ly - 9 << "\" width=\"12\" height=\"12\" fill=\""
      << it.color << "\"/>\n";
    s << "<text x=\"" << lx + 18 << "\" y=\"" << ly + 1 << "\">" << svg_escape(it.label)
      << "</text>\n";
    ly += 20;
  }
  s << "<text x=\"" << lx << "\" y=\"" << ly + 10
    << "\" fill=\"#555\">The cache is a second</text>\n";
  s << "<text x=\"" << lx << "\" y=\"" << ly + 26 << "\" fill=\"#555\">model in memory.</text>\n";
  s << "</svg>\n";
  return s.str();
}

}  // namespace kvs
