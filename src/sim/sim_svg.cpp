#include "sim/sim_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <sstream>
#include <vector>

#include "planner/svg_text.h"

namespace kvs {

namespace {

constexpr double kW = 900, kLeft = 70, kRight = 170, kTop = 56;
constexpr double kPanelH = 150, kGap = 40;
constexpr size_t kPoints = 300;

// One panel: a frame, y grid with labels, and the x axis ticks (time).
struct Panel {
  double top;
  double y_max;
  double x_max;
  [[nodiscard]] double X(double t) const { return kLeft + t / x_max * (kW - kLeft - kRight); }
  [[nodiscard]] double Y(double v) const {
    return top + kPanelH - std::min(v, y_max) / y_max * kPanelH;
  }
};

// A tick label: whole numbers without decimals, percentages of fractions.
std::string label(double v, double step, bool percent) {
  char buf[32];
  if (percent)
    std::snprintf(buf, sizeof buf, "%.0f%%", v * 100);
  else if (step >= 1)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else
    std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

void frame(std::ostringstream& s, const Panel& p, const std::string& title, bool percent) {
  const double pw = kW - kLeft - kRight;
  s << "<text x=\"" << kLeft << "\" y=\"" << svg_num(p.top - 8) << "\" font-weight=\"bold\">"
    << svg_escape(title) << "</text>\n";
  const double step = svg_tick_step(p.y_max, 4);
  for (double v = 0; v <= p.y_max + 1e-9; v += step) {
    s << "<line x1=\"" << kLeft << "\" x2=\"" << svg_num(kLeft + pw) << "\" y1=\""
      << svg_num(p.Y(v)) << "\" y2=\"" << svg_num(p.Y(v)) << "\" stroke=\"#eee\"/>\n";
    s << "<text x=\"" << kLeft - 6 << "\" y=\"" << svg_num(p.Y(v) + 4)
      << "\" text-anchor=\"end\" fill=\"#555\">" << label(v, step, percent) << "</text>\n";
  }
  const double xstep = svg_tick_step(p.x_max, 8);
  for (double t = 0; t <= p.x_max + 1e-9; t += xstep)
    s << "<text x=\"" << svg_num(p.X(t)) << "\" y=\"" << svg_num(p.top + kPanelH + 14)
      << "\" text-anchor=\"middle\" fill=\"#555\">" << label(t, xstep, false) << "</text>\n";
  s << "<rect x=\"" << kLeft << "\" y=\"" << svg_num(p.top) << "\" width=\"" << svg_num(pw)
    << "\" height=\"" << kPanelH << "\" fill=\"none\" stroke=\"#999\"/>\n";
}

// A series as a polyline through the buckets' midpoints (the class names the series).
void polyline(std::ostringstream& s, const Panel& p, const std::vector<SeriesPoint>& pts,
              const std::function<double(const SeriesPoint&)>& value, const char* color,
              const char* cls) {
  s << "<polyline class=\"" << cls << "\" fill=\"none\" stroke=\"" << color
    << "\" stroke-width=\"1.5\" points=\"";
  for (const SeriesPoint& q : pts)
    s << svg_num(p.X((q.start_s + q.end_s) / 2)) << "," << svg_num(p.Y(value(q))) << " ";
  s << "\"/>\n";
}

// A horizontal dashed reference line at `v` with a label at its right end.
void reference(std::ostringstream& s, const Panel& p, double v, const std::string& text) {
  const double x2 = kW - kRight;
  s << "<line x1=\"" << kLeft << "\" x2=\"" << svg_num(x2) << "\" y1=\"" << svg_num(p.Y(v))
    << "\" y2=\"" << svg_num(p.Y(v)) << "\" stroke=\"#555\" stroke-dasharray=\"4 3\"/>\n<text x=\""
    << svg_num(x2 - 4) << "\" y=\"" << svg_num(p.Y(v) - 4)
    << "\" text-anchor=\"end\" fill=\"#555\">" << svg_escape(text) << "</text>\n";
}

void legend(std::ostringstream& s, const Panel& p, int row, const char* color,
            const std::string& text) {
  const double x = kW - kRight + 14, y = p.top + 14 + row * 18;
  s << "<rect x=\"" << svg_num(x) << "\" y=\"" << svg_num(y - 9)
    << "\" width=\"12\" height=\"10\" fill=\"" << color << "\"/>\n<text x=\"" << svg_num(x + 18)
    << "\" y=\"" << svg_num(y) << "\">" << svg_escape(text) << "</text>\n";
}

}  // namespace

std::string render_sim_svg(const SimSetup& setup, const SimResult& r) {
  const SimSummary& m = r.summary;
  const double makespan = std::max(m.makespan_s, 1e-9);
  const std::vector<SeriesPoint> pts =
      time_series(r.replicas, setup.pool.num_blocks, makespan, kPoints);
  // Running is bounded by max-num-seqs on every replica; its panel shows that bound.
  const double seq_limit = static_cast<double>(setup.scheduler.max_num_seqs) * setup.replicas;
  double run_max = 1, wait_max = 1;
  uint64_t pre_max = 1;
  for (const SeriesPoint& q : pts) {
    run_max = std::max(run_max, q.running);
    wait_max = std::max(wait_max, q.waiting);
    pre_max = std::max(pre_max, q.preempted_recompute + q.preempted_swap);
  }
  const double height = kTop + 16 + 4 * kPanelH + 3 * kGap + 50;
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kW << "\" height=\"" << height
    << "\" viewBox=\"0 0 " << kW << " " << height
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s << "<text x=\"" << kLeft << "\" y=\"20\" font-size=\"15\" font-weight=\"bold\">"
    << svg_escape(setup.plan.model.display_name + " on " +
                  (setup.args.device == "cpu" ? std::string("cpu") : setup.device.name) +
                  ": requests, KV cache and preemptions over time")
    << "</text>\n";
  char sub[2][200];
  std::snprintf(sub[0], sizeof sub[0],
                "%llu requests; %u replica(s) of %u blocks x %u tokens, %s KV; virtual seconds, "
                "%zu intervals",
                static_cast<unsigned long long>(m.requests), setup.replicas, setup.pool.num_blocks,
                setup.pool.block_size, kv_dtype_name(setup.pool.shape.k_dtype), pts.size());
  std::snprintf(
      sub[1], sizeof sub[1], "prefix-cache hit rate %.1f%%; preemptions %llu recompute + %llu swap",
      m.prefix_cache_hit_rate * 100, static_cast<unsigned long long>(m.preemptions_recompute),
      static_cast<unsigned long long>(m.preemptions_swap));
  s << "<text x=\"" << kLeft << "\" y=\"36\" fill=\"#555\">" << svg_escape(sub[0]) << "</text>\n";
  s << "<text x=\"" << kLeft << "\" y=\"52\" fill=\"#555\">" << svg_escape(sub[1]) << "</text>\n";

  // The max-num-seqs bound as a line when it is near the curve, else as a note.
  const bool limit_in_range = seq_limit <= 1.5 * run_max;
  const Panel run{kTop + 26, (limit_in_range ? std::max(run_max, seq_limit) : run_max) * 1.15,
                  makespan};
  frame(s, run, "running requests (all replicas, mean per interval)", false);
  if (limit_in_range) {
    reference(s, run, seq_limit, "max-num-seqs x replicas");
  } else {
    s << "<text x=\"" << svg_num(kW - kRight - 4) << "\" y=\"" << svg_num(run.top + 14)
      << "\" text-anchor=\"end\" fill=\"#555\">max-num-seqs x replicas = " << seq_limit
      << " (above)</text>\n";
  }
  polyline(
      s, run, pts, [](const SeriesPoint& q) { return q.running; }, "#1f77b4", "running");
  legend(s, run, 0, "#1f77b4", "running");

  const Panel wait{run.top + kPanelH + kGap, wait_max * 1.1, makespan};
  frame(s, wait, "waiting requests (arrived, not admitted yet or preempted)", false);
  polyline(
      s, wait, pts, [](const SeriesPoint& q) { return q.waiting; }, "#d62728", "waiting");
  legend(s, wait, 0, "#d62728", "waiting");

  const Panel kv{wait.top + kPanelH + kGap, 1.0, makespan};
  frame(s, kv, "KV pool (fraction of blocks, mean over replicas)", true);
  // In use filled from the bottom; the line above adds the blocks kept only as prefix cache.
  s << "<polygon class=\"kv_in_use\" fill=\"#2ca02c\" fill-opacity=\"0.5\" points=\""
    << svg_num(kv.X(0)) << "," << svg_num(kv.Y(0)) << " ";
  for (const SeriesPoint& q : pts)
    s << svg_num(kv.X((q.start_s + q.end_s) / 2)) << "," << svg_num(kv.Y(q.kv_in_use)) << " ";
  s << svg_num(kv.X(makespan)) << "," << svg_num(kv.Y(0)) << "\"/>\n";
  polyline(
      s, kv, pts, [](const SeriesPoint& q) { return q.kv_in_use + q.kv_cached_free; }, "#9467bd",
      "kv_cached");
  legend(s, kv, 0, "#2ca02c", "in use");
  legend(s, kv, 1, "#9467bd", "+ prefix cache");

  const Panel pre{kv.top + kPanelH + kGap, static_cast<double>(pre_max) * 1.1, makespan};
  frame(s, pre, "preemptions per interval", false);
  const double bar = std::max(1.0, (kW - kLeft - kRight) / static_cast<double>(pts.size()));
  for (const SeriesPoint& q : pts) {
    // Recompute at the bottom, swap stacked on it.
    const double rc = static_cast<double>(q.preempted_recompute);
    const double sw = static_cast<double>(q.preempted_swap);
    if (rc > 0)
      s << "<rect class=\"recompute\" x=\"" << svg_num(pre.X(q.start_s)) << "\" y=\""
        << svg_num(pre.Y(rc)) << "\" width=\"" << svg_num(bar) << "\" height=\""
        << svg_num(pre.Y(0) - pre.Y(rc)) << "\" fill=\"#ff7f0e\"/>\n";
    if (sw > 0)
      s << "<rect class=\"swap\" x=\"" << svg_num(pre.X(q.start_s)) << "\" y=\""
        << svg_num(pre.Y(rc + sw)) << "\" width=\"" << svg_num(bar) << "\" height=\""
        << svg_num(pre.Y(rc) - pre.Y(rc + sw)) << "\" fill=\"#8c564b\"/>\n";
  }
  legend(s, pre, 0, "#ff7f0e", "recompute");
  legend(s, pre, 1, "#8c564b", "swap");
  s << "<text x=\"" << svg_num(kLeft + (kW - kLeft - kRight) / 2) << "\" y=\""
    << svg_num(pre.top + kPanelH + 32) << "\" text-anchor=\"middle\">time (s)</text>\n";
  s << "</svg>\n";
  return s.str();
}

}  // namespace kvs
