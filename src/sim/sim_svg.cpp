#include "sim/sim_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

namespace kvs {

namespace {

constexpr double kW = 900, kLeft = 70, kRight = 170, kTop = 56;
constexpr double kPanelH = 150, kGap = 40;
constexpr size_t kPoints = 300;

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '"')
      out += "&quot;";
    else
      out.push_back(c);
  }
  return out;
}

double tick_step(double range, int ticks) {
  if (!(range > 0)) return 1;
  const double raw = range / ticks;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (raw <= m * mag) return m * mag;
  return 10 * mag;
}

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

void frame(std::ostringstream& s, const Panel& p, const std::string& title, bool percent) {
  const double pw = kW - kLeft - kRight;
  s << "<text x=\"" << kLeft << "\" y=\"" << num(p.top - 8) << "\" font-weight=\"bold\">"
    << escape(title) << "</text>\n";
  const double step = tick_step(p.y_max, 4);
  for (double v = 0; v <= p.y_max + 1e-9; v += step) {
    s << "<line x1=\"" << kLeft << "\" x2=\"" << num(kLeft + pw) << "\" y1=\"" << num(p.Y(v))
      << "\" y2=\"" << num(p.Y(v)) << "\" stroke=\"#eee\"/>\n";
    s << "<text x=\"" << kLeft - 6 << "\" y=\"" << num(p.Y(v) + 4)
      << "\" text-anchor=\"end\" fill=\"#555\">"
      << (percent ? num(v * 100).substr(0, num(v * 100).find('.')) + "%" : num(v)) << "</text>\n";
  }
  const double xstep = tick_step(p.x_max, 8);
  for (double t = 0; t <= p.x_max + 1e-9; t += xstep)
    s << "<text x=\"" << num(p.X(t)) << "\" y=\"" << num(p.top + kPanelH + 14)
      << "\" text-anchor=\"middle\" fill=\"#555\">" << num(t) << "</text>\n";
  s << "<rect x=\"" << kLeft << "\" y=\"" << num(p.top) << "\" width=\"" << num(pw)
    << "\" height=\"" << kPanelH << "\" fill=\"none\" stroke=\"#999\"/>\n";
}

void polyline(std::ostringstream& s, const Panel& p, const std::vector<SeriesPoint>& pts,
              double SeriesPoint::*field, const char* color) {
  s << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"1.5\" points=\"";
  for (const SeriesPoint& q : pts)
    s << num(p.X((q.start_s + q.end_s) / 2)) << "," << num(p.Y(q.*field)) << " ";
  s << "\"/>\n";
}

void legend(std::ostringstream& s, const Panel& p, int row, const char* color,
            const std::string& text) {
  const double x = kW - kRight + 14, y = p.top + 14 + row * 18;
  s << "<rect x=\"" << num(x) << "\" y=\"" << num(y - 9) << "\" width=\"12\" height=\"10\" fill=\""
    << color << "\"/>\n<text x=\"" << num(x + 18) << "\" y=\"" << num(y) << "\">" << escape(text)
    << "</text>\n";
}

}  // namespace

std::string render_sim_svg(const SimSetup& setup, const SimResult& r) {
  const SimSummary& m = r.summary;
  const double makespan = std::max(m.makespan_s, 1e-9);
  const std::vector<SeriesPoint> pts =
      time_series(r.replicas, setup.pool.num_blocks, makespan, kPoints);
  double req_max = 1;
  uint64_t pre_max = 1;
  for (const SeriesPoint& q : pts) {
    req_max = std::max({req_max, q.running, q.waiting});
    pre_max = std::max(pre_max, q.preemptions);
  }
  const double height = kTop + 3 * kPanelH + 2 * kGap + 50;
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kW << "\" height=\"" << height
    << "\" viewBox=\"0 0 " << kW << " " << height
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s << "<text x=\"" << kLeft << "\" y=\"20\" font-size=\"15\" font-weight=\"bold\">"
    << escape(setup.plan.model.display_name + " on " +
              (setup.args.device == "cpu" ? std::string("cpu") : setup.device.name) +
              ": requests, KV cache and preemptions over time")
    << "</text>\n";
  char sub[256];
  std::snprintf(sub, sizeof sub,
                "%llu requests, %u blocks of %u tokens per replica, %u replica(s); hit rate "
                "%.1f%%, %llu preemptions; virtual seconds",
                static_cast<unsigned long long>(m.requests), setup.pool.num_blocks,
                setup.pool.block_size, setup.replicas, m.prefix_cache_hit_rate * 100,
                static_cast<unsigned long long>(m.preemptions_recompute + m.preemptions_swap));
  s << "<text x=\"" << kLeft << "\" y=\"38\" fill=\"#555\">" << escape(sub) << "</text>\n";

  const Panel reqs{kTop + 10, req_max * 1.1, makespan};
  frame(s, reqs, "requests", false);
  polyline(s, reqs, pts, &SeriesPoint::waiting, "#d62728");
  polyline(s, reqs, pts, &SeriesPoint::running, "#1f77b4");
  legend(s, reqs, 0, "#1f77b4", "running");
  legend(s, reqs, 1, "#d62728", "waiting");

  const Panel kv{reqs.top + kPanelH + kGap, 1.0, makespan};
  frame(s, kv, "KV pool (fraction of blocks)", true);
  // Stacked: in use at the bottom, cached-free above it.
  s << "<polygon fill=\"#2ca02c\" fill-opacity=\"0.5\" points=\"" << num(kv.X(0)) << ","
    << num(kv.Y(0)) << " ";
  for (const SeriesPoint& q : pts)
    s << num(kv.X((q.start_s + q.end_s) / 2)) << "," << num(kv.Y(q.kv_in_use)) << " ";
  s << num(kv.X(makespan)) << "," << num(kv.Y(0)) << "\"/>\n";
  s << "<polyline fill=\"none\" stroke=\"#9467bd\" stroke-width=\"1.5\" points=\"";
  for (const SeriesPoint& q : pts)
    s << num(kv.X((q.start_s + q.end_s) / 2)) << "," << num(kv.Y(q.kv_in_use + q.kv_cached_free))
      << " ";
  s << "\"/>\n";
  legend(s, kv, 0, "#2ca02c", "in use");
  legend(s, kv, 1, "#9467bd", "+ prefix cache");

  const Panel pre{kv.top + kPanelH + kGap, static_cast<double>(pre_max) * 1.1, makespan};
  frame(s, pre, "preemptions per interval", false);
  const double bar = (kW - kLeft - kRight) / static_cast<double>(pts.size());
  for (const SeriesPoint& q : pts) {
    if (q.preemptions == 0) continue;
    const double y = pre.Y(static_cast<double>(q.preemptions));
    s << "<rect x=\"" << num(pre.X(q.start_s)) << "\" y=\"" << num(y) << "\" width=\""
      << num(std::max(1.0, bar)) << "\" height=\"" << num(pre.top + kPanelH - y)
      << "\" fill=\"#ff7f0e\"/>\n";
  }
  legend(s, pre, 0, "#ff7f0e", "preemptions");
  s << "<text x=\"" << num(kLeft + (kW - kLeft - kRight) / 2) << "\" y=\""
    << num(pre.top + kPanelH + 32) << "\" text-anchor=\"middle\">time (s)</text>\n";
  s << "</svg>\n";
  return s.str();
}

}  // namespace kvs
