// SPDX-License-Identifier: MIT
//
// The chart of pipeline_bench's sweep, drawn from the rows of its table: by
// pipeline_bench itself at the end of a run, and without a GPU from a CSV it
// wrote earlier (benchmarks/plot_sweep.cpp, `pipeline_bench --plot-from`).
// Host-only C++17; nothing here needs CUDA.
//
// One panel per intensity (chained FMAs per element); x is the window (chunk)
// size on a log scale, y the median time in ms on the panel's own scale, with
// efficiency (floor / time) on the right-hand axis. Four series, told apart
// by colour, line pattern and marker (so they read in greyscale too):
//   hand-written best   the fastest of the hand-written schedules at the point
//   chunkpipe default   `cp auto`: the automatic policy at that window
//   chunkpipe best      the fastest fixed policy (serial, slot_streams,
//     fixed policy      stage_streams at any depth), each point labelled
//   floor               from the component passes of the same run
// Markers are nested (hollow square, hollow triangle, small filled circle),
// so series lying on each other stay visible. Where two series are equal
// within the point's resolution (how far apart the guide's schedule timed
// twice landed, the "(again)" row), they are ringed and the panel says so.

#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <istream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace sweep_chart {

/// One row of pipeline_bench's table (a schedule at one sweep point).
struct Row {
  int intensity = 0;     // chained FMAs per element
  double chunk_mib = 0;  // the window
  std::string schedule;  // "lesson naive", "guide 3-stream", "cp auto", ...
  std::string family;    // hand / chunkpipe / repeat (the guide timed again) / tuning
  int depth = 0;
  double median_ms = 0, min_ms = 0, max_ms = 0;
  double floor_ms = 0;
};

/// What the chart says about the run as a whole.
struct Info {
  int elem_bytes = 4;
  double total_mib = 0;   // bytes per direction
  std::string title;      // optional; replaces the default first line
  std::string source;     // optional; "from ..." in the second line
};

namespace detail {

inline std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> out;
  std::string item;
  std::stringstream in(line);
  while (std::getline(in, item, ',')) out.push_back(item);
  if (!line.empty() && line.back() == ',') out.emplace_back();
  return out;
}

inline bool number(const std::string& s, double& v) {
  if (s.empty()) return false;
  char* end = nullptr;
  v = std::strtod(s.c_str(), &end);
  return end && *end == '\0' && std::isfinite(v);
}

inline std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '&') o += "&amp;";
    else if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '\'') o += "&apos;";
    else o += c;
  }
  return o;
}

inline std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

inline std::string num(double v) { return fmt("%.1f", v); }

/// "cp stage_streams d16" -> "stage d16"; "guide 3-stream" -> "guide".
inline std::string short_name(const std::string& s) {
  std::string n = s.rfind("cp ", 0) == 0 ? s.substr(3) : s;
  for (const char* long_name : {"stage_streams", "slot_streams"}) {
    const std::string l = long_name;
    if (n.rfind(l, 0) == 0) n = l.substr(0, l.find('_')) + n.substr(l.size());
  }
  if (n == "guide 3-stream") n = "guide";
  if (n == "lesson double buffer") n = "double buffer";
  return n;
}

/// Tick step of about `want` intervals over `span`: 1, 2 or 5 times a power of ten.
inline double nice_step(double span, int want) {
  const double raw = span / want, p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * p >= raw) return m * p;
  }
  return 10 * p;
}

/// A MiB figure as the axis shows it: 1, 4, 0.5, 1.5.
inline std::string mib(double v) {
  return std::fabs(v - std::round(v)) < 1e-9 ? fmt("%.0f", v) : fmt("%g", v);
}

// The series' looks: colour (Okabe-Ito, colour-blind safe), line pattern and
// marker, each distinct on its own.
struct Look {
  const char* colour;
  const char* dash;  // stroke-dasharray; "" solid
  double width;
};
constexpr Look kHand{"#D55E00", "7 4", 1.8};
constexpr Look kDefault{"#0072B2", "", 2.4};
constexpr Look kFixed{"#009E73", "2 3", 2.0};
constexpr Look kFloor{"#222222", "12 4 3 4", 1.3};

inline std::string line_attrs(const Look& l) {
  std::string s = "fill='none' stroke='" + std::string(l.colour) + "' stroke-width='" + fmt("%.1f", l.width) + "'";
  if (*l.dash) s += " stroke-dasharray='" + std::string(l.dash) + "'";
  return s + " stroke-linecap='round' stroke-linejoin='round'";
}

enum class Marker { none, square, triangle, dot };

inline std::string marker(Marker m, double x, double y, const char* colour) {
  const std::string c = colour;
  switch (m) {
    case Marker::square:
      return "<rect x='" + num(x - 5.5) + "' y='" + num(y - 5.5) + "' width='11' height='11' fill='white' stroke='" + c +
             "' stroke-width='1.8'/>\n";
    case Marker::triangle:
      return "<path d='M" + num(x) + ',' + num(y - 6.5) + " L" + num(x + 5.8) + ',' + num(y + 3.8) + " L" +
             num(x - 5.8) + ',' + num(y + 3.8) + " Z' fill='white' stroke='" + c + "' stroke-width='1.8'/>\n";
    case Marker::dot:
      return "<circle cx='" + num(x) + "' cy='" + num(y) + "' r='3.2' fill='" + c + "'/>\n";
    case Marker::none:
      break;
  }
  return "";
}

/// One sweep point's four figures, and its resolution (-1: not measured).
struct Point {
  double chunk_mib = 0;
  const Row* hand = nullptr;
  const Row* def = nullptr;
  const Row* fixed = nullptr;
  double floor_ms = 0;
  double resolution = -1;
};

/// Whether a and b are equal within the point's resolution.
inline bool tie(const Point& p, const Row* a, const Row* b) {
  return a && b && p.resolution >= 0 && std::fabs(a->median_ms / b->median_ms - 1.0) <= p.resolution;
}

}  // namespace detail

/// Reads the CSV pipeline_bench writes (--csv): the sweep rows (a numeric
/// chunk_mib), leaving out the untuned default's, the tuning table's, the
/// windows under 1 MiB timed for the default only and the calibration rows.
/// Columns are found by name. On a malformed file returns false and says why.
inline bool read_csv(std::istream& in, std::vector<Row>& rows, Info& info, std::string& error) {
  using detail::number;
  std::string line;
  if (!std::getline(in, line)) {
    error = "empty file";
    return false;
  }
  const std::vector<std::string> head = detail::split(line);
  std::map<std::string, std::size_t> col;
  for (std::size_t i = 0; i < head.size(); ++i) col[head[i]] = i;
  for (const char* need : {"intensity", "chunk_mib", "schedule", "family", "median_ms", "floor_ms"}) {
    if (!col.count(need)) {
      error = std::string("no column '") + need + "' in the header";
      return false;
    }
  }
  auto field = [&](const std::vector<std::string>& f, const char* name) -> std::string {
    const auto it = col.find(name);
    return it != col.end() && it->second < f.size() ? f[it->second] : std::string();
  };
  int lineno = 1;
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const std::vector<std::string> f = detail::split(line);
    Row r;
    double v = 0;
    if (!number(field(f, "chunk_mib"), r.chunk_mib)) continue;  // "default": the untuned Options{} row
    r.family = field(f, "family");
    if (r.family == "tuning" || r.family == "small" || r.family == "calibration") continue;
    r.schedule = field(f, "schedule");
    if (!number(field(f, "intensity"), v)) {
      error = "line " + std::to_string(lineno) + ": bad intensity";
      return false;
    }
    r.intensity = static_cast<int>(v);
    if (!number(field(f, "median_ms"), r.median_ms) || !number(field(f, "floor_ms"), r.floor_ms) ||
        r.median_ms <= 0 || r.floor_ms <= 0) {
      error = "line " + std::to_string(lineno) + ": bad median_ms or floor_ms";
      return false;
    }
    r.min_ms = number(field(f, "min_ms"), v) ? v : r.median_ms;
    r.max_ms = number(field(f, "max_ms"), v) ? v : r.median_ms;
    r.depth = number(field(f, "depth"), v) ? static_cast<int>(v) : 0;
    if (number(field(f, "elem_bytes"), v)) info.elem_bytes = static_cast<int>(v);
    if (number(field(f, "total_mib"), v)) info.total_mib = v;
    rows.push_back(std::move(r));
  }
  if (rows.empty()) {
    error = "no sweep rows";
    return false;
  }
  return true;
}

/// The chart as a standalone SVG document.
inline std::string svg(const std::vector<Row>& rows, const Info& info) {
  using namespace detail;
  // The sweep's intensities and windows, in order.
  std::vector<int> intensities;
  std::vector<double> chunks;
  for (const Row& r : rows) {
    if (r.family == "tuning") continue;
    if (std::find(intensities.begin(), intensities.end(), r.intensity) == intensities.end())
      intensities.push_back(r.intensity);
    if (std::find(chunks.begin(), chunks.end(), r.chunk_mib) == chunks.end()) chunks.push_back(r.chunk_mib);
  }
  std::sort(intensities.begin(), intensities.end());
  std::sort(chunks.begin(), chunks.end());

  // The four series at every point.
  std::map<int, std::vector<Point>> panels;
  std::vector<std::string> hand_names;
  bool any_resolution = false;
  for (int iters : intensities) {
    for (double cm : chunks) {
      Point p;
      p.chunk_mib = cm;
      const Row* guide = nullptr;
      const Row* again = nullptr;
      for (const Row& r : rows) {
        if (r.intensity != iters || r.chunk_mib != cm) continue;
        const auto faster = [&](const Row* best) { return !best || r.median_ms < best->median_ms; };
        if (r.family == "hand" && faster(p.hand)) p.hand = &r;
        if (r.schedule == "cp auto") p.def = &r;
        if (r.family == "chunkpipe" && r.schedule != "cp auto" && r.schedule.rfind("cp default", 0) != 0 &&
            faster(p.fixed))
          p.fixed = &r;
        if (r.schedule == "guide 3-stream") guide = &r;
        if (r.family == "repeat") again = &r;
        p.floor_ms = r.floor_ms;
      }
      if (!p.hand && !p.def && !p.fixed) continue;
      if (guide && again) {
        p.resolution = std::fabs(again->median_ms / guide->median_ms - 1.0);
        any_resolution = true;
      }
      if (p.hand && std::find(hand_names.begin(), hand_names.end(), p.hand->schedule) == hand_names.end())
        hand_names.push_back(p.hand->schedule);
      panels[iters].push_back(p);
    }
  }
  const bool one_hand = hand_names.size() == 1;
  std::vector<int> def_depths;  // the default's depth, for the legend
  for (const auto& panel : panels) {
    for (const Point& p : panel.second) {
      if (p.def && std::find(def_depths.begin(), def_depths.end(), p.def->depth) == def_depths.end())
        def_depths.push_back(p.def->depth);
    }
  }

  // Geometry.
  const int n = static_cast<int>(intensities.size());
  const int cols = n == 3 ? 3 : std::max(1, std::min(n, 2)), nrows = (n + cols - 1) / cols;
  const double pad = 8, left = 50, right = 44, plot_w = 372, plot_h = 212, gap_y = 12;
  // Each panel's note on ties, which series the rings hold.
  std::map<int, std::string> notes;
  bool long_note = false;
  for (int iters : intensities) {
    std::map<std::string, int> kinds;
    for (const Point& p : panels[iters]) {
      if (tie(p, p.hand, p.def)) kinds["default = hand-written"]++;
      if (tie(p, p.hand, p.fixed)) kinds["best fixed = hand-written"]++;
      if (tie(p, p.def, p.fixed)) kinds["default = best fixed"]++;
    }
    std::string note;
    for (const auto& k : kinds) note += (note.empty() ? "ringed: " : ", ") + k.first;
    if (!any_resolution) note = "ties not judged (no repeated schedule)";
    long_note = long_note || !note.empty();
    notes[iters] = note;
  }
  const double head = long_note ? 32 : 19, foot = 34;  // a second header line for the notes
  const double cell_w = left + plot_w + right, cell_h = head + plot_h + foot + gap_y;
  const double width = 2 * pad + cols * cell_w;
  std::ostringstream o;

  // Title, then the legend (laid out in rows that fit the width).
  std::string title = info.title;
  if (title.empty()) title = "pipeline_bench: time against window size";
  const std::string sub = mib(info.total_mib) + " MiB each way, " + std::to_string(info.elem_bytes) +
                          "-byte elements; medians over the rounds; left axis: time on each panel's own scale, "
                          "right axis: efficiency = floor / time";
  struct Entry {
    std::string text;
    Look look;
    Marker m;
    bool ring;
  };
  std::vector<Entry> legend{
      {one_hand ? "hand-written best (" + hand_names.front() + " at every point)" : "hand-written best (labelled)", kHand,
       Marker::square, false},
      {def_depths.size() == 1 ? "chunkpipe default (auto policy, depth " + std::to_string(def_depths.front()) + ")"
                             : "chunkpipe default (auto policy)",
       kDefault, Marker::dot, false},
      {"chunkpipe best fixed policy (labelled)", kFixed, Marker::triangle, false},
      {"floor (from the component passes)", kFloor, Marker::none, false}};
  if (any_resolution) legend.push_back({"ringed: equal within the point's resolution (A/A)", kFloor, Marker::none, true});
  double lx = pad + 4, ly = 62;
  std::ostringstream leg;
  for (const Entry& e : legend) {
    const double w = 40 + 5.7 * static_cast<double>(e.text.size()) + 22;
    if (lx + w > width - pad && lx > pad + 4) {
      lx = pad + 4;
      ly += 18;
    }
    if (e.ring) {
      leg << "<ellipse cx='" << num(lx + 16) << "' cy='" << num(ly - 4) << "' rx='11' ry='9' fill='none' stroke='#333' "
          << "stroke-width='1.3' stroke-dasharray='3 2'/>\n";
    } else {
      leg << "<line x1='" << num(lx) << "' x2='" << num(lx + 32) << "' y1='" << num(ly - 4) << "' y2='" << num(ly - 4)
          << "' " << line_attrs(e.look) << "/>\n"
          << marker(e.m, lx + 16, ly - 4, e.look.colour);
    }
    leg << "<text x='" << num(lx + 40) << "' y='" << num(ly) << "'>" << esc(e.text) << "</text>\n";
    lx += w;
  }
  const double top = ly + 14;
  const double height = top + nrows * cell_h - gap_y - 2;

  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << num(width) << "' height='" << num(height)
    << "' viewBox='0 0 " << num(width) << ' ' << num(height)
    << "' font-family='DejaVu Sans, Helvetica, Arial, sans-serif' font-size='11'>\n"
    << "<rect width='100%' height='100%' fill='white'/>\n"
    << "<text x='" << num(pad + 4) << "' y='22' font-size='15' font-weight='bold'>" << esc(title) << "</text>\n"
    << "<text x='" << num(pad + 4) << "' y='40' fill='#444'>" << esc(sub) << "</text>\n"
    << (info.source.empty() ? std::string()
                            : "<text x='" + num(width - pad - 4) + "' y='22' text-anchor='end' fill='#666'>data: " +
                                  esc(info.source) + "</text>\n")
    << leg.str();

  const double lmin = std::log2(chunks.front()), lmax = std::max(lmin + 1, std::log2(chunks.back()));
  for (int pi = 0; pi < n; ++pi) {
    const int iters = intensities[pi];
    const std::vector<Point>& pts = panels[iters];
    const int col = pi % cols, row = pi / cols;
    const double x0 = pad + col * cell_w + left, y0 = top + row * cell_h + head;
    const double inset = 16;  // keeps the end markers off the frame
    auto X = [&](double cm) { return x0 + inset + (plot_w - 2 * inset) * (std::log2(cm) - lmin) / (lmax - lmin); };

    // The panel's time scale: every figure drawn, and a little room.
    double lo = 1e300, hi = -1e300;
    for (const Point& p : pts) {
      for (const Row* r : {p.hand, p.def, p.fixed}) {
        if (r) lo = std::min(lo, r->median_ms), hi = std::max(hi, r->median_ms);
      }
      lo = std::min(lo, p.floor_ms), hi = std::max(hi, p.floor_ms);
    }
    if (pts.empty()) lo = 0, hi = 1;
    const double span0 = std::max(hi - lo, 0.5);
    lo -= 0.13 * span0;  // room for the labels under the lowest markers
    hi += 0.10 * span0;  // and over the highest
    auto Y = [&](double ms) { return y0 + plot_h - plot_h * (ms - lo) / (hi - lo); };

    // Frame, time grid and ticks (left), efficiency ticks (right), windows (below).
    o << "<rect x='" << num(x0) << "' y='" << num(y0) << "' width='" << num(plot_w) << "' height='" << num(plot_h)
      << "' fill='none' stroke='#999'/>\n";
    const double step = nice_step(hi - lo, 5);
    const int decimals = step >= 1 ? 0 : step >= 0.1 ? 1 : 2;
    for (double t = std::ceil(lo / step) * step; t <= hi + 1e-9; t += step) {
      const double y = Y(t);
      o << "<line x1='" << num(x0) << "' x2='" << num(x0 + plot_w) << "' y1='" << num(y) << "' y2='" << num(y)
        << "' stroke='#e6e6e6'/>\n<text x='" << num(x0 - 5) << "' y='" << num(y + 4) << "' text-anchor='end'>"
        << fmt(decimals == 0 ? "%.0f" : decimals == 1 ? "%.1f" : "%.2f", t) << "</text>\n";
    }
    if (!pts.empty()) {
      const double fl = pts.front().floor_ms;
      const double elo = fl / hi, ehi = std::min(1.0, fl / lo);
      const double estep = nice_step(ehi - elo, 4);
      for (double e = std::ceil(elo / estep) * estep; e <= ehi + 1e-9; e += estep) {
        const double y = Y(fl / e);
        o << "<line x1='" << num(x0 + plot_w) << "' x2='" << num(x0 + plot_w + 4) << "' y1='" << num(y) << "' y2='"
          << num(y) << "' stroke='#777'/><text x='" << num(x0 + plot_w + 6) << "' y='" << num(y + 4)
          << "' fill='#666'>" << fmt(estep >= 0.1 ? "%.1f" : "%.2f", e) << "</text>\n";
      }
    }
    for (double cm : chunks) {
      o << "<line x1='" << num(X(cm)) << "' x2='" << num(X(cm)) << "' y1='" << num(y0 + plot_h) << "' y2='"
        << num(y0 + plot_h + 4) << "' stroke='#777'/><text x='" << num(X(cm)) << "' y='" << num(y0 + plot_h + 15)
        << "' text-anchor='middle'>" << mib(cm) << "</text>\n";
    }
    if (row == nrows - 1 || pi + cols >= n) {
      o << "<text x='" << num(x0 + plot_w / 2) << "' y='" << num(y0 + plot_h + 30)
        << "' text-anchor='middle'>window (chunk) size, MiB, log scale</text>\n";
    }
    if (col == 0) {
      o << "<text transform='translate(" << num(x0 - 38) << ',' << num(y0 + plot_h / 2)
        << ") rotate(-90)' text-anchor='middle'>time (ms)</text>\n";
    }
    if (col == cols - 1 || pi == n - 1) {
      o << "<text transform='translate(" << num(x0 + plot_w + 38) << ',' << num(y0 + plot_h / 2)
        << ") rotate(90)' text-anchor='middle' fill='#666'>efficiency (floor / time)</text>\n";
    }

    const std::string title_text = std::to_string(iters) + " FMAs per element";
    o << "<text x='" << num(x0) << "' y='" << num(y0 - (long_note ? 19 : 6)) << "' font-weight='bold'>" << title_text
      << "</text><text x='" << num(x0 + 7.2 * title_text.size() + 8) << "' y='" << num(y0 - (long_note ? 19 : 6))
      << "' fill='#444'>floor " << fmt("%.2f", pts.empty() ? 0.0 : pts.front().floor_ms) << " ms</text>\n";
    if (!notes[iters].empty()) {
      o << "<text x='" << num(x0) << "' y='" << num(y0 - 6) << "' font-size='10' fill='#333'>" << esc(notes[iters])
        << "</text>\n";
    }

    // Series: floor, hand-written, best fixed, default (drawn last, on top).
    auto polyline = [&](const Look& look, auto value) {
      std::ostringstream pl;
      for (const Point& p : pts) {
        const double v = value(p);
        if (v > 0) pl << num(X(p.chunk_mib)) << ',' << num(Y(v)) << ' ';
      }
      o << "<polyline " << line_attrs(look) << " points='" << pl.str() << "'/>\n";
    };
    auto ms = [](const Row* r) { return r ? r->median_ms : -1.0; };
    polyline(kFloor, [](const Point& p) { return p.floor_ms; });
    polyline(kHand, [&](const Point& p) { return ms(p.hand); });
    polyline(kFixed, [&](const Point& p) { return ms(p.fixed); });
    polyline(kDefault, [&](const Point& p) { return ms(p.def); });
    // A point's label: above or below its marker, wherever it covers the
    // fewest lines and markers (and stays inside the frame).
    auto series_y = [&](int which, double xq) {  // the polyline's y at screen x, NAN off it
      auto value = [&](const Point& p) {
        return which == 0 ? p.floor_ms : ms(which == 1 ? p.hand : which == 2 ? p.fixed : p.def);
      };
      for (std::size_t i = 0; i + 1 < pts.size(); ++i) {
        const double xa = X(pts[i].chunk_mib), xb = X(pts[i + 1].chunk_mib);
        const double va = value(pts[i]), vb = value(pts[i + 1]);
        if (xq >= xa && xq <= xb && va > 0 && vb > 0) return Y(va) + (Y(vb) - Y(va)) * (xq - xa) / (xb - xa);
      }
      return static_cast<double>(NAN);
    };
    struct Box {
      double l, t, r, b;
    };
    std::vector<Box> placed;  // labels drawn so far in this panel
    auto label = [&](const Point& p, const Row* r, const char* colour) {
      const std::string text = short_name(r->schedule);
      const double x = X(p.chunk_mib), ym = Y(r->median_ms), w = 5.4 * static_cast<double>(text.size());
      const bool first = &p == &pts.front(), last = &p == &pts.back();
      const double xc = first ? x - 8 : last ? x + 8 - w : x - w / 2;  // left edge when above or below
      struct Spot {
        double left, base, preference;
      };
      const Spot spots[] = {{xc, ym - 9, 0}, {xc, ym + 15, 0.3}, {x + 9, ym + 3.5, 0.6}, {x - 9 - w, ym + 3.5, 0.9}};
      Spot best = spots[0];
      double best_cost = 1e300;
      for (const Spot& sp : spots) {
        const double top_y = sp.base - 8, bottom_y = sp.base + 1;
        double cost = sp.preference;
        if (top_y < y0 - 1 || bottom_y > y0 + plot_h + 1 || sp.left < x0 - 1 || sp.left + w > x0 + plot_w + 1) cost += 100;
        for (int which = 0; which < 4; ++which) {  // lines through the label
          for (int k = 0; k <= 4; ++k) {
            const double yq = series_y(which, sp.left + w * k / 4);
            if (std::isfinite(yq) && yq >= top_y - 1 && yq <= bottom_y + 1) cost += 1;
          }
        }
        for (const Point& q : pts) {  // markers under the label (its own excepted)
          for (const Row* m : {q.hand, q.def, q.fixed}) {
            if (!m || m == r) continue;
            const double xq = X(q.chunk_mib), yq = Y(m->median_ms);
            if (xq + 6 > sp.left && xq - 6 < sp.left + w && yq + 6 > top_y && yq - 6 < bottom_y) cost += 3;
          }
        }
        for (const Box& b : placed) {
          if (b.l < sp.left + w && sp.left < b.r && b.t < bottom_y && top_y < b.b) cost += 5;
        }
        if (cost < best_cost) best_cost = cost, best = sp;
      }
      placed.push_back({best.left - 2, best.base - 9, best.left + w + 2, best.base + 2});
      o << "<text x='" << num(best.left) << "' y='" << num(best.base) << "' font-size='9.5' fill='" << colour << "'>"
        << esc(text) << "</text>\n";
    };
    for (const Point& p : pts) {
      const double x = X(p.chunk_mib);
      // Rings around series that tie here.
      std::vector<double> ys;
      for (const auto& [a, b] : {std::pair{p.hand, p.def}, std::pair{p.hand, p.fixed}, std::pair{p.def, p.fixed}}) {
        if (tie(p, a, b)) ys.push_back(Y(a->median_ms)), ys.push_back(Y(b->median_ms));
      }
      if (!ys.empty()) {
        const auto [mn, mx] = std::minmax_element(ys.begin(), ys.end());
        o << "<ellipse cx='" << num(x) << "' cy='" << num((*mn + *mx) / 2) << "' rx='11' ry='"
          << num((*mx - *mn) / 2 + 10) << "' fill='none' stroke='#333' stroke-width='1.3' stroke-dasharray='3 2'/>\n";
      }
      if (p.hand) o << marker(Marker::square, x, Y(p.hand->median_ms), kHand.colour);
      if (p.fixed) o << marker(Marker::triangle, x, Y(p.fixed->median_ms), kFixed.colour);
      if (p.def) o << marker(Marker::dot, x, Y(p.def->median_ms), kDefault.colour);
      if (p.fixed) label(p, p.fixed, "#00664a");
      if (p.hand && !one_hand) label(p, p.hand, "#a04000");
    }
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace sweep_chart
