// SPDX-License-Identifier: MIT
// Definitions for report.hpp. Included at its bottom where chunkpipe is
// header-only, or once by <chunkpipe/compiled.hpp> (detail/linkage.hpp); do
// not include directly.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <locale>
#include <ostream>
#include <sstream>
#include <tuple>
#include <utility>

namespace chunkpipe {

namespace detail {

/// Total length of the union of [start, end) intervals.
CHUNKPIPE_INLINE double union_length(std::vector<std::pair<double, double>> spans) {
  std::sort(spans.begin(), spans.end());
  double total = 0.0;
  bool open = false;
  double lo = 0.0, hi = 0.0;
  for (const auto& s : spans) {
    if (s.second <= s.first) continue;
    if (open && s.first <= hi) {
      hi = std::max(hi, s.second);
      continue;
    }
    if (open) total += hi - lo;
    lo = s.first;
    hi = s.second;
    open = true;
  }
  if (open) total += hi - lo;
  return total;
}

CHUNKPIPE_INLINE double start_ms(const Report& r) {
  if (r.ops.empty()) return 0.0;
  double t = r.ops.front().start_ms;
  for (const TimedOp& op : r.ops) t = std::min(t, op.start_ms);
  return t;
}

/// One row of a picture: one kind of work (one lane of it), of one member
/// of a spread run.
struct ReportRow {
  OpKind kind;
  int stage;
  int lane;
  std::string name;
  std::vector<std::size_t> ops;  ///< indices into Report::ops, by start
  int device = 0;                ///< TimedOp::device
};

CHUNKPIPE_INLINE std::string row_name(OpKind kind, int stage) {
  switch (kind) {
    case OpKind::host_in: return "host-in";
    case OpKind::h2d: return "H2D";
    case OpKind::stage: return "stage " + std::to_string(stage);
    case OpKind::d2h: return "D2H";
    case OpKind::host_out: return "host-out";
  }
  return "?";
}

/// Rows in the order data flows (host-in, H2D, stages, D2H, host-out), only
/// those that have ops; for a spread run (Report::devices) one such set per
/// member, named after it. Ops of one kind that really overlap (more than
/// the ~1 us resolution of CUDA events) go to a further lane of the row, so
/// no picture ever hides one op under another.
CHUNKPIPE_INLINE std::vector<ReportRow> report_rows(const Report& r) {
  std::vector<std::size_t> order(r.ops.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  const bool spread = !r.devices.empty();
  auto key = [&](std::size_t i) {
    const TimedOp& op = r.ops[i];
    return std::make_tuple(spread ? op.device : 0, static_cast<int>(op.kind), op.kind == OpKind::stage ? op.stage : -1,
                           op.start_ms, op.id);
  };
  auto name = [&](const TimedOp& op, int stage) {
    if (!spread) return row_name(op.kind, stage);
    const auto d = static_cast<std::size_t>(op.device);
    return (d < r.devices.size() ? r.devices[d] : "m" + std::to_string(op.device)) + " " + row_name(op.kind, stage);
  };
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return key(a) < key(b); });

  constexpr double tolerance_ms = 1e-3;
  std::vector<ReportRow> rows;
  std::vector<double> lane_end;  // per row of the current kind
  std::size_t first_of_kind = 0;
  for (std::size_t i : order) {
    const TimedOp& op = r.ops[i];
    const int stage = op.kind == OpKind::stage ? op.stage : -1;
    const int device = spread ? op.device : 0;
    if (rows.empty() || rows[first_of_kind].kind != op.kind || rows[first_of_kind].stage != stage ||
        rows[first_of_kind].device != device) {
      first_of_kind = rows.size();
      rows.push_back({op.kind, stage, 0, name(op, stage), {}, device});
      lane_end.assign(1, -1e300);
    }
    std::size_t lane = 0;
    while (lane < lane_end.size() && lane_end[lane] > op.start_ms + tolerance_ms) ++lane;
    if (lane == lane_end.size()) {
      lane_end.push_back(-1e300);
      rows.push_back({op.kind, stage, static_cast<int>(lane), name(op, stage) + " #" + std::to_string(lane + 1), {},
                      device});
    }
    lane_end[lane] = std::max(lane_end[lane], op.end_ms);
    rows[first_of_kind + lane].ops.push_back(i);
  }
  return rows;
}

CHUNKPIPE_INLINE std::string fixed(double v, int decimals) {
  std::ostringstream s;
  s.imbue(std::locale::classic());
  s << std::fixed << std::setprecision(decimals) << v;
  return s.str();
}

CHUNKPIPE_INLINE std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  const bool whole = std::fabs(bytes - std::round(bytes)) < 1e-9;
  return fixed(bytes, whole ? 0 : 2) + ' ' + units[u];
}

CHUNKPIPE_INLINE char chunk_glyph(std::size_t chunk) {
  static const char glyphs[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  return glyphs[chunk % 62];
}

/// A tick step of 1, 2 or 5 times a power of ten, at least `raw`.
CHUNKPIPE_INLINE double nice_step(double raw) {
  if (!(raw > 0.0)) return 1.0;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * p >= raw * (1.0 - 1e-12)) return m * p;
  }
  return 10.0 * p;
}

CHUNKPIPE_INLINE std::string tick_label(double v, double step) {
  const int decimals = step >= 1.0 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
  return fixed(v, decimals);
}

CHUNKPIPE_INLINE std::string queue_name(const Report& r, int queue) {
  if (queue >= 0 && static_cast<std::size_t>(queue) < r.queues.size()) {
    return r.queues[static_cast<std::size_t>(queue)].name;
  }
  return "queue " + std::to_string(queue);
}

CHUNKPIPE_INLINE std::string summary_line(const Report& r) {
  std::string s = "makespan " + fixed(makespan_ms(r), 3) + " ms";
  if (link_known(r.link) && makespan_ms(r) > 0.0) {
    s += ", floor " + fixed(floor_ms(r), 3) + " ms, efficiency " + fixed(100.0 * efficiency(r), 1) + '%';
  }
  return s;
}

CHUNKPIPE_INLINE std::string title_of(const Report& r) {
  return (r.label.empty() ? std::string("chunkpipe run") : r.label) + (r.predicted ? " (predicted)" : " (measured)");
}

CHUNKPIPE_INLINE std::string json_escape(const std::string& in) {
  std::string out;
  for (char c : in) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out;
}

CHUNKPIPE_INLINE std::string xml_escape(const std::string& in) {
  std::string out;
  for (char c : in) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

/// A colour per chunk: hues a golden angle apart, so neighbouring chunks,
/// which sit next to each other in every row, never look alike.
CHUNKPIPE_INLINE std::string chunk_colour(std::size_t chunk) {
  const double h = std::fmod(static_cast<double>(chunk) * 137.50776405, 360.0) / 60.0;
  const double s = 0.62, l = (chunk % 2 == 0) ? 0.56 : 0.66;
  const double c = (1.0 - std::fabs(2.0 * l - 1.0)) * s;
  const double x = c * (1.0 - std::fabs(std::fmod(h, 2.0) - 1.0));
  double r = 0, g = 0, b = 0;
  switch (static_cast<int>(h) % 6) {
    case 0: r = c, g = x; break;
    case 1: r = x, g = c; break;
    case 2: g = c, b = x; break;
    case 3: g = x, b = c; break;
    case 4: r = x, b = c; break;
    default: r = c, b = x; break;
  }
  const double m = l - c / 2.0;
  char buf[8];
  auto byte = [&](double v) { return static_cast<unsigned>(std::lround(std::clamp(v + m, 0.0, 1.0) * 255.0)); };
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", byte(r), byte(g), byte(b));
  return buf;
}

CHUNKPIPE_INLINE std::string op_name(const TimedOp& op) {
  return row_name(op.kind, op.stage) + " chunk " + std::to_string(op.chunk);
}

/// Writes `text` to `path`, or throws pipeline_error saying why not.
CHUNKPIPE_INLINE void write_text_file(const std::string& path, const std::string& text, const char* what) {
  auto fail = [&](int err) {
    throw pipeline_error(std::string("chunkpipe: cannot write ") + what + " to '" + path +
                         "': " + std::strerror(err != 0 ? err : EIO));
  };
  errno = 0;
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) fail(errno);
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
  f.flush();
  if (!f) fail(errno);
  f.close();
  if (f.fail()) fail(errno);
}

}  // namespace detail

CHUNKPIPE_INLINE double makespan_ms(const Report& report) {
  if (report.ops.empty()) return 0.0;
  double end = report.ops.front().end_ms;
  for (const TimedOp& op : report.ops) end = std::max(end, op.end_ms);
  return std::max(0.0, end - detail::start_ms(report));
}

CHUNKPIPE_INLINE double busy_ms(const Report& report, OpKind kind, int stage) {
  std::vector<std::pair<double, double>> spans;
  for (const TimedOp& op : report.ops) {
    if (op.kind != kind) continue;
    if (kind == OpKind::stage && stage >= 0 && op.stage != stage) continue;
    spans.emplace_back(op.start_ms, op.end_ms);
  }
  return detail::union_length(std::move(spans));
}

CHUNKPIPE_INLINE double stage_ms(const Report& report) { return busy_ms(report, OpKind::stage, -1); }

CHUNKPIPE_INLINE bool link_known(const LinkModel& link) noexcept { return link.h2d_gbps > 0.0 && link.d2h_gbps > 0.0; }

CHUNKPIPE_INLINE double floor_ms(const Report& report) {
  const LinkModel& l = report.link;
  if (!link_known(l)) return 0.0;
  // GB/s = 1e9 B/s = 1e6 B/ms.
  const double in = static_cast<double>(report.bytes_in) / (l.h2d_gbps * 1e6);
  const double out = static_cast<double>(report.bytes_out) / (l.d2h_gbps * 1e6);
  double copies = std::max(in, out);
  if (l.copy_engines == 1) {
    copies = in + out;
  } else if (l.both_gbps > 0.0) {
    copies = std::max(copies, static_cast<double>(report.bytes_in + report.bytes_out) / (l.both_gbps * 1e6));
  }
  return std::max(copies, stage_ms(report));
}

CHUNKPIPE_INLINE double efficiency(const Report& report) {
  const double m = makespan_ms(report);
  const double f = floor_ms(report);
  return (m > 0.0 && f > 0.0) ? f / m : 0.0;
}

CHUNKPIPE_INLINE double overlap(const Report& report) {
  const double m = makespan_ms(report);
  if (!(m > 0.0)) return 0.0;
  double busy = 0.0;
  for (OpKind k : {OpKind::host_in, OpKind::h2d, OpKind::stage, OpKind::d2h, OpKind::host_out}) {
    busy += busy_ms(report, k);
  }
  return busy / m;
}

CHUNKPIPE_INLINE double achieved_gbps(const Report& report) {
  const double m = makespan_ms(report);
  if (!(m > 0.0)) return 0.0;
  return static_cast<double>(report.bytes_in + report.bytes_out) / (m * 1e6);
}

CHUNKPIPE_INLINE std::ostream& operator<<(std::ostream& os, const Report& r) {
  using detail::fixed;
  std::ostringstream s;  // built whole, so the caller's stream flags stay as they were
  s.imbue(std::locale::classic());
  s << detail::title_of(r) << '\n';
  s << "  schedule  " << to_string(r.policy) << ", depth " << r.depth << ", " << r.chunks
    << (r.chunks == 1 ? " chunk" : " chunks") << " of " << r.chunk_elems << " elems";
  if (r.elems > 0) {
    const double per_elem_in = static_cast<double>(r.bytes_in) / static_cast<double>(r.elems);
    const double per_elem_out = static_cast<double>(r.bytes_out) / static_cast<double>(r.elems);
    s << " (" << detail::format_bytes(per_elem_in * static_cast<double>(r.chunk_elems)) << " in, "
      << detail::format_bytes(per_elem_out * static_cast<double>(r.chunk_elems)) << " out)";
  }
  s << '\n';
  if (!r.devices.empty()) {
    s << "  spread    over " << r.devices.size() << " members:";
    for (std::size_t d = 0; d < r.devices.size(); ++d) s << (d == 0 ? " " : ", ") << r.devices[d];
    s << '\n';
  }
  s << "  busy      ";
  const std::vector<detail::ReportRow> rows = detail::report_rows(r);
  bool first = true;
  std::vector<std::pair<OpKind, int>> shown;  // a spread run's kinds, each once: busy_ms is the union over members
  for (const detail::ReportRow& row : rows) {
    if (row.lane != 0) continue;
    const std::pair<OpKind, int> kind{row.kind, row.kind == OpKind::stage ? row.stage : -1};
    if (std::find(shown.begin(), shown.end(), kind) != shown.end()) continue;
    shown.push_back(kind);
    s << (first ? "" : " | ") << detail::row_name(kind.first, kind.second) << ' '
      << fixed(busy_ms(r, kind.first, kind.second), 3) << " ms";
    first = false;
  }
  if (first) s << "nothing ran";
  s << '\n';
  const double m = makespan_ms(r);
  s << "  makespan  " << fixed(m, 3) << " ms, " << fixed(overlap(r), 2) << " engines busy on average\n";
  if (link_known(r.link)) {
    s << "  floor     " << fixed(floor_ms(r), 3) << " ms on " << (r.link.name.empty() ? "the link" : r.link.name)
      << " (" << fixed(r.link.h2d_gbps, 1) << " in, " << fixed(r.link.d2h_gbps, 1) << " out, "
      << (r.link.both_gbps > 0.0 ? fixed(r.link.both_gbps, 1) : std::string("?")) << " both GB/s)";
    if (m > 0.0) s << ", efficiency " << fixed(100.0 * efficiency(r), 1) << '%';
    s << '\n';
  } else if (!r.link.name.empty()) {
    // A named link with no bandwidths is one that bounds nothing (the host
    // backend's memcpy): there is no floor to show, rather than an unknown one.
    s << "  floor     none (" << r.link.name << ")\n";
  } else {
    s << "  floor     unknown (no link bandwidths)\n";
  }
  s << "  achieved  " << fixed(achieved_gbps(r), 2) << " GB/s "
    << (link_known(r.link) || r.link.name.empty() ? "over the link" : "copied") << " ("
    << detail::format_bytes(static_cast<double>(r.bytes_in)) << " in, "
    << detail::format_bytes(static_cast<double>(r.bytes_out)) << " out)\n";
  if (!r.io.empty()) s << "  io        " << r.io << '\n';
  return os << s.str();
}

CHUNKPIPE_INLINE std::string ascii_timeline(const Report& r, int width) {
  using detail::fixed;
  const int w = std::max(width, 20);
  const std::vector<detail::ReportRow> rows = detail::report_rows(r);
  std::size_t name_w = 8;
  for (const auto& row : rows) name_w = std::max(name_w, row.name.size());
  const std::string pad(name_w + 1, ' ');

  std::string out = detail::title_of(r) + '\n';
  const double t0 = detail::start_ms(r);
  const double span = makespan_ms(r);
  if (rows.empty() || !(span > 0.0)) return out + "(no ops ran)\n";
  const double dt = span / w;

  for (const auto& row : rows) {
    // Each cell shows the chunk that covers most of it; a cell less than
    // half covered stays blank unless it holds the middle of an op, so ops
    // shorter than a cell still show.
    std::vector<double> best(static_cast<std::size_t>(w), 0.0), total(best);
    std::vector<bool> forced(best.size(), false);
    std::string cells(best.size(), ' ');
    for (std::size_t i : row.ops) {
      const TimedOp& op = r.ops[i];
      const double s = (op.start_ms - t0) / dt, e = (op.end_ms - t0) / dt;
      if (!(e > s)) continue;
      const int c0 = std::clamp(static_cast<int>(std::floor(s)), 0, w - 1);
      const int c1 = std::clamp(static_cast<int>(std::ceil(e)) - 1, c0, w - 1);
      for (int c = c0; c <= c1; ++c) {
        const auto k = static_cast<std::size_t>(c);
        const double cover = std::min(e, c + 1.0) - std::max(s, static_cast<double>(c));
        if (cover <= 0.0) continue;
        total[k] += cover;
        if (cover > best[k]) {
          best[k] = cover;
          cells[k] = detail::chunk_glyph(op.chunk);
        }
      }
      forced[static_cast<std::size_t>(std::clamp(static_cast<int>((s + e) / 2.0), 0, w - 1))] = true;
    }
    for (std::size_t k = 0; k < cells.size(); ++k) {
      if (total[k] < 0.5 && !forced[k]) cells[k] = ' ';
    }
    while (!cells.empty() && cells.back() == ' ') cells.pop_back();
    out += row.name + std::string(pad.size() - row.name.size(), ' ') + cells + '\n';
  }

  // Axis: a tick about every 10 columns, at 1, 2 or 5 times a power of ten.
  const double step = detail::nice_step(span / (w / 10.0));
  std::string axis(static_cast<std::size_t>(w) + 1, '-');
  std::string labels(static_cast<std::size_t>(w) + 12, ' ');
  std::size_t free_from = 0;
  for (int i = 0;; ++i) {
    const double t = i * step;
    if (t > span * (1.0 + 1e-9)) break;
    const auto col = static_cast<std::size_t>(std::lround(t / dt));
    if (col >= axis.size()) break;
    axis[col] = '+';
    const std::string text = detail::tick_label(t, step);
    if (col >= free_from && col + text.size() <= labels.size()) {
      labels.replace(col, text.size(), text);
      free_from = col + text.size() + 1;
    }
  }
  while (!labels.empty() && labels.back() == ' ') labels.pop_back();
  out += pad + axis + '\n';
  out += pad + labels + " ms\n";
  out += pad + detail::summary_line(r) + "; one glyph per chunk (index mod 62: 0-9a-zA-Z)\n";
  return out;
}

CHUNKPIPE_INLINE void write_chrome_trace(const Report& r, const std::string& path) {
  using detail::fixed;
  using detail::json_escape;
  const std::vector<detail::ReportRow> rows = detail::report_rows(r);
  const double t0 = detail::start_ms(r);
  std::string j;
  j += "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  j += "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,\"args\":{\"name\":\"" +
       json_escape(detail::title_of(r)) + "\"}}";
  for (std::size_t t = 0; t < rows.size(); ++t) {
    const std::string tid = std::to_string(t + 1);
    j += ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":" + tid + ",\"args\":{\"name\":\"" +
         json_escape(rows[t].name) + "\"}}";
    // Perfetto sorts threads by name unless told; keep the flow order.
    j += ",\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":1,\"tid\":" + tid +
         ",\"args\":{\"sort_index\":" + tid + "}}";
  }
  for (std::size_t t = 0; t < rows.size(); ++t) {
    for (std::size_t i : rows[t].ops) {
      const TimedOp& op = r.ops[i];
      j += ",\n{\"name\":\"" + json_escape(detail::op_name(op)) + "\",\"cat\":\"" +
           std::string(to_string(op.kind)) + "\",\"ph\":\"X\",\"pid\":1,\"tid\":" + std::to_string(t + 1) +
           ",\"ts\":" + fixed((op.start_ms - t0) * 1000.0, 3) +
           ",\"dur\":" + fixed(std::max(0.0, op.end_ms - op.start_ms) * 1000.0, 3) +
           ",\"args\":{\"op\":" + std::to_string(op.id) + ",\"chunk\":" + std::to_string(op.chunk) +
           ",\"slot\":" + std::to_string(op.slot) + ",\"queue\":\"" + json_escape(detail::queue_name(r, op.queue)) +
           "\",\"bytes\":" + std::to_string(op.bytes) + ",\"elems\":" + std::to_string(op.elems) + "}}";
    }
  }
  j += "\n],\"otherData\":{\"label\":\"" + json_escape(r.label) + "\",\"predicted\":" +
       (r.predicted ? "true" : "false") + ",\"policy\":\"" + std::string(to_string(r.policy)) +
       "\",\"depth\":" + std::to_string(r.depth) + ",\"chunks\":" + std::to_string(r.chunks) +
       ",\"makespan_ms\":" + fixed(makespan_ms(r), 6) + ",\"floor_ms\":" + fixed(floor_ms(r), 6) + "}}\n";
  detail::write_text_file(path, j, "the Chrome trace");
}

CHUNKPIPE_INLINE void write_svg(const Report& r, const std::string& path) {
  using detail::fixed;
  using detail::xml_escape;
  const std::vector<detail::ReportRow> rows = detail::report_rows(r);
  const double t0 = detail::start_ms(r);
  const double span = makespan_ms(r);

  std::size_t longest = 0;  // a spread run's row names carry the member's
  for (const auto& row : rows) longest = std::max(longest, row.name.size());
  const double left = std::max(96.0, 7.0 * static_cast<double>(longest) + 20.0), right = 36, top = 58, row_h = 26,
               gap = 8, plot_w = 1000;
  const double plot_h = static_cast<double>(rows.size()) * (row_h + gap);
  const double width = left + plot_w + right;
  const double height = top + plot_h + 46;
  const double scale = span > 0.0 ? plot_w / span : 0.0;
  auto x_of = [&](double t) { return left + (t - t0) * scale; };

  std::string s;
  s += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + fixed(width, 0) + "\" height=\"" + fixed(height, 0) +
       "\" viewBox=\"0 0 " + fixed(width, 0) + ' ' + fixed(height, 0) +
       "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n";
  s += "<rect class=\"background\" width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
  s += "<text x=\"" + fixed(left, 0) + "\" y=\"22\" font-size=\"16\" font-weight=\"bold\">" +
       xml_escape(detail::title_of(r)) + "</text>\n";
  std::string sub = detail::summary_line(r) + " \xC2\xB7 " + std::string(to_string(r.policy)) + ", depth " +
                    std::to_string(r.depth) + ", " + std::to_string(r.chunks) + " chunks \xC2\xB7 one colour per chunk";
  s += "<text x=\"" + fixed(left, 0) + "\" y=\"42\" font-size=\"12\" fill=\"#444\">" + xml_escape(sub) + "</text>\n";

  // Grid and axis first, so the ops are drawn over them.
  const double step = detail::nice_step(span / 10.0);
  const double axis_y = top + plot_h + 4;
  if (span > 0.0) {
    for (int i = 0;; ++i) {
      const double t = i * step;
      if (t > span * (1.0 + 1e-9)) break;
      const std::string x = fixed(left + t * scale, 2);
      s += "<line x1=\"" + x + "\" y1=\"" + fixed(top - 4, 0) + "\" x2=\"" + x + "\" y2=\"" + fixed(axis_y + 5, 0) +
           "\" stroke=\"#e2e2e2\"/>\n";
      s += "<text x=\"" + x + "\" y=\"" + fixed(axis_y + 19, 0) + "\" font-size=\"11\" text-anchor=\"middle\">" +
           detail::tick_label(t, step) + "</text>\n";
    }
  }
  s += "<line x1=\"" + fixed(left, 0) + "\" y1=\"" + fixed(axis_y, 0) + "\" x2=\"" + fixed(left + plot_w, 0) +
       "\" y2=\"" + fixed(axis_y, 0) + "\" stroke=\"#333\"/>\n";
  s += "<text x=\"" + fixed(left + plot_w, 0) + "\" y=\"" + fixed(axis_y + 36, 0) +
       "\" font-size=\"11\" text-anchor=\"end\">time (ms)</text>\n";

  for (std::size_t k = 0; k < rows.size(); ++k) {
    const double y = top + static_cast<double>(k) * (row_h + gap);
    s += "<text x=\"" + fixed(left - 10, 0) + "\" y=\"" + fixed(y + row_h / 2 + 4, 1) +
         "\" font-size=\"12\" text-anchor=\"end\">" + xml_escape(rows[k].name) + "</text>\n";
    s += "<rect class=\"band\" x=\"" + fixed(left, 0) + "\" y=\"" + fixed(y, 1) + "\" width=\"" + fixed(plot_w, 0) +
         "\" height=\"" + fixed(row_h, 0) + "\" fill=\"#f4f4f4\"/>\n";
    for (std::size_t i : rows[k].ops) {
      const TimedOp& op = r.ops[i];
      const double x = x_of(op.start_ms);
      const double w = std::max(0.5, (op.end_ms - op.start_ms) * scale);
      std::string tip = detail::op_name(op) + ": " + fixed(op.start_ms - t0, 3) + " to " + fixed(op.end_ms - t0, 3) +
                        " ms, slot " + std::to_string(op.slot) + ", " + detail::queue_name(r, op.queue);
      if (op.bytes != 0) tip += ", " + detail::format_bytes(static_cast<double>(op.bytes));
      s += "<rect class=\"op\" x=\"" + fixed(x, 2) + "\" y=\"" + fixed(y, 1) + "\" width=\"" + fixed(w, 2) +
           "\" height=\"" + fixed(row_h, 0) + "\" fill=\"" + detail::chunk_colour(op.chunk) + "\"" +
           (w > 3 ? " stroke=\"#ffffff\" stroke-width=\"0.75\"" : "") + "><title>" + xml_escape(tip) +
           "</title></rect>\n";
      const std::string label = std::to_string(op.chunk);
      if (w >= 7.0 * static_cast<double>(label.size()) + 4.0) {
        s += "<text x=\"" + fixed(x + w / 2, 2) + "\" y=\"" + fixed(y + row_h / 2 + 4, 1) +
             "\" font-size=\"11\" text-anchor=\"middle\" fill=\"#111\">" + label + "</text>\n";
      }
    }
  }
  // The floor as a line: the gap between it and the last op is what the
  // schedule left on the table.
  const double floor_at = floor_ms(r);
  if (floor_at > 0.0 && span > 0.0 && floor_at <= span * (1.0 + 1e-9)) {
    const std::string x = fixed(left + floor_at * scale, 2);
    s += "<line class=\"floor\" x1=\"" + x + "\" y1=\"" + fixed(top - 6, 0) + "\" x2=\"" + x + "\" y2=\"" +
         fixed(axis_y, 0) + "\" stroke=\"#c00000\" stroke-width=\"1.5\" stroke-dasharray=\"5,3\"/>\n";
    s += "<text x=\"" + x + "\" y=\"" + fixed(top - 9, 0) +
         "\" font-size=\"11\" text-anchor=\"middle\" fill=\"#c00000\">floor</text>\n";
  }
  s += "</svg>\n";
  detail::write_text_file(path, s, "the SVG");
}

}  // namespace chunkpipe
