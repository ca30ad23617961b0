// SPDX-License-Identifier: MIT
// Report figures (busy time as a union, floor, efficiency, overlap) and the
// three pictures: the ASCII timeline, the Chrome trace and the SVG.
#include <chunkpipe/report.hpp>
#include <chunkpipe/simulate.hpp>

#include "catch.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace chunkpipe;

namespace {

bool near(double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max(1.0, std::fabs(b)); }

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::size_t count(const std::string& s, const std::string& part) {
  std::size_t n = 0;
  for (std::size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + part.size())) ++n;
  return n;
}

TimedOp timed(std::size_t id, std::size_t chunk, OpKind kind, int queue, double start, double end,
              std::size_t bytes = 0, int stage = -1) {
  TimedOp op;
  op.id = id;
  op.chunk = chunk;
  op.kind = kind;
  op.stage = kind == OpKind::stage ? (stage < 0 ? 0 : stage) : -1;
  op.slot = static_cast<int>(chunk % 2);
  op.queue = queue;
  op.start_ms = start;
  op.end_ms = end;
  op.bytes = bytes;
  op.elems = 250000;
  return op;
}

/// A measured-looking double buffer: two chunks whose copies in overlap,
/// because each stream's start event fires before the engine is free.
Report sample() {
  Report r;
  r.label = "sample";
  r.policy = Policy::slot_streams;
  r.depth = 2;
  r.chunk_elems = 250000;
  r.chunks = 2;
  r.elems = 500000;
  r.bytes_in = 2000000;
  r.bytes_out = 1000000;
  r.queues = {{QueueKind::device, "stream 0"}, {QueueKind::device, "stream 1"}};
  r.ops = {
      timed(0, 0, OpKind::h2d, 0, 0.0, 2.0, 1000000),  timed(1, 0, OpKind::stage, 0, 2.0, 3.0),
      timed(2, 0, OpKind::d2h, 0, 3.0, 4.0, 500000),   timed(3, 1, OpKind::h2d, 1, 1.0, 3.0, 1000000),
      timed(4, 1, OpKind::stage, 1, 3.0, 4.0),         timed(5, 1, OpKind::d2h, 1, 4.0, 5.0, 500000),
  };
  r.link.name = "test link";
  r.link.h2d_gbps = 1.0;
  r.link.d2h_gbps = 1.0;
  r.link.both_gbps = 1.5;
  return r;
}

std::string read(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::filesystem::path temp(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("chunkpipe-report-test-" + name);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream s(text);
  for (std::string line; std::getline(s, line);) lines.push_back(line);
  return lines;
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

TEST_CASE("busy time is the union of a kind's intervals", "[report]") {
  const Report r = sample();
  CHECK(near(makespan_ms(r), 5.0));
  CHECK(near(busy_ms(r, OpKind::h2d), 3.0));  // [0,2] and [1,3] overlap: 3, not 4
  CHECK(near(busy_ms(r, OpKind::stage), 2.0));
  CHECK(near(busy_ms(r, OpKind::d2h), 2.0));
  CHECK(near(busy_ms(r, OpKind::host_in), 0.0));
  CHECK(near(overlap(r), (3.0 + 2.0 + 2.0) / 5.0));
  CHECK(near(achieved_gbps(r), 3e6 / 5e6));

  Report stages = sample();
  stages.ops = {timed(0, 0, OpKind::stage, 0, 0.0, 2.0, 0, 0), timed(1, 0, OpKind::stage, 1, 1.0, 3.0, 0, 1),
                timed(2, 1, OpKind::stage, 0, 5.0, 6.0, 0, 0)};
  CHECK(near(stage_ms(stages), 4.0));
  CHECK(near(busy_ms(stages, OpKind::stage, 0), 3.0));
  CHECK(near(busy_ms(stages, OpKind::stage, 1), 2.0));
  CHECK(near(makespan_ms(stages), 6.0));
}

TEST_CASE("the floor is the widest of the link terms and the kernel time", "[report]") {
  Report r = sample();
  // in 2 ms at 1 GB/s, out 1 ms, both 3 MB at 1.5 GB/s = 2 ms, K = 2 ms.
  CHECK(near(floor_ms(r), 2.0));
  CHECK(near(efficiency(r), 2.0 / 5.0));
  r.link.both_gbps = 1.0;  // a link that cannot do both at once at all
  CHECK(near(floor_ms(r), 3.0));
  r.link.both_gbps = 0.0;  // unknown two-way figure: no penalty
  CHECK(near(floor_ms(r), 2.0));
  r.link.copy_engines = 1;  // one engine: the directions take turns
  CHECK(near(floor_ms(r), 3.0));
  r.link = LinkModel{};
  r.link.h2d_gbps = r.link.d2h_gbps = r.link.both_gbps = 1000.0;
  CHECK(near(floor_ms(r), 2.0));  // the kernels bound it
  r.link = LinkModel{};  // unknown link: no floor, no efficiency, no NaN
  CHECK(!link_known(r.link));
  CHECK(floor_ms(r) == 0.0);
  CHECK(efficiency(r) == 0.0);

  const Report empty;
  CHECK(makespan_ms(empty) == 0.0);
  CHECK(overlap(empty) == 0.0);
  CHECK(efficiency(empty) == 0.0);
  CHECK(achieved_gbps(empty) == 0.0);
}

TEST_CASE("a report prints as a compact table", "[report]") {
  std::ostringstream s;
  s << sample();
  const std::string text = s.str();
  INFO(text);
  CHECK(contains(text, "sample (measured)"));
  CHECK(contains(text, "slot_streams, depth 2, 2 chunks of 250000 elems"));
  CHECK(contains(text, "H2D 3.000 ms"));
  CHECK(contains(text, "stage 0 2.000 ms"));
  CHECK(contains(text, "makespan  5.000 ms"));
  CHECK(contains(text, "floor     2.000 ms"));
  CHECK(contains(text, "efficiency 40.0%"));
  CHECK(contains(text, "0.60 GB/s"));

  Report unknown = sample();
  unknown.link = LinkModel{};
  unknown.predicted = true;
  std::ostringstream u;
  u << unknown;
  CHECK(contains(u.str(), "sample (predicted)"));
  CHECK(contains(u.str(), "floor     unknown"));
  CHECK(!contains(u.str(), "efficiency"));
  CHECK(!contains(u.str(), "nan"));
}

TEST_CASE("the ASCII timeline has one row per kind of work and one glyph per chunk", "[report]") {
  Workload w;
  w.chunk_elems = 1000;
  w.elems = 3000;
  w.stage_ns_per_elem = {4.0};  // 4 us a chunk, as long as each copy
  Machine m;
  m.link.h2d_gbps = m.link.d2h_gbps = 1.0;
  const Report r = simulate(Policy::serial, 1, w, m);
  const std::string text = ascii_timeline(r, 60);
  INFO(text);
  const std::vector<std::string> lines = lines_of(text);
  REQUIRE(lines.size() == 1 + 3 + 3);  // title, H2D / stage 0 / D2H, axis, labels, summary
  CHECK(contains(lines[0], "(predicted)"));
  CHECK(starts_with(lines[1], "H2D "));
  CHECK(starts_with(lines[2], "stage 0 "));
  CHECK(starts_with(lines[3], "D2H "));
  CHECK(!contains(text, "host-in"));
  for (std::size_t i = 1; i <= 3; ++i) CHECK(lines[i].size() <= 9 + 60);
  // Serial: each chunk's copy in comes after the previous chunk's copy out.
  const std::string in = lines[1].substr(9), kernel = lines[2].substr(9);  // cells only
  REQUIRE(in.find('0') != std::string::npos);
  CHECK(in.find('0') < in.find('1'));
  CHECK(in.find('1') < in.find('2'));
  CHECK(kernel.find('0') > in.rfind('0'));
  CHECK(kernel.find('1') > in.rfind('1'));
  CHECK(contains(lines[4], "+--"));
  CHECK(contains(lines[5], " ms"));
  CHECK(contains(lines[6], "makespan"));

  SECTION("glyphs cycle through 0-9a-zA-Z") {
    Report g = sample();
    g.ops = {timed(0, 10, OpKind::h2d, 0, 0.0, 1.0), timed(1, 36, OpKind::h2d, 0, 1.0, 2.0),
             timed(2, 61, OpKind::h2d, 0, 2.0, 3.0), timed(3, 62, OpKind::h2d, 0, 3.0, 4.0)};
    const std::vector<std::string> l = lines_of(ascii_timeline(g, 40));
    CHECK(contains(l[1], "aaaaaaaaaaAAAAAAAAAAZZZZZZZZZZ0000000000"));
  }
  SECTION("ops of one kind that overlap get a second lane") {
    const std::string t = ascii_timeline(sample(), 50);
    INFO(t);
    CHECK(contains(t, "\nH2D "));
    CHECK(contains(t, "\nH2D #2 "));
    CHECK(!contains(t, "D2H #2"));
  }
  SECTION("staging rows appear when the plan stages") {
    PlanShape shape;
    shape.stage_in = shape.stage_out = true;
    Machine mh = m;
    mh.host_copy_gbps = 2.0;
    const std::string t = ascii_timeline(simulate(make_plan(Policy::stage_streams, 2, shape, 3), w, mh));
    INFO(t);
    const auto at = [&](const char* row) { return t.find(std::string("\n") + row + ' '); };
    REQUIRE(at("host-in") != std::string::npos);
    CHECK(at("host-in") < at("H2D"));
    CHECK(at("H2D") < at("stage 0"));
    CHECK(at("stage 0") < at("D2H"));
    CHECK(at("D2H") < at("host-out"));
  }
  SECTION("an empty report says so") { CHECK(contains(ascii_timeline(Report{}), "no ops")); }
}

TEST_CASE("the Chrome trace has one complete event per op and names its rows", "[report]") {
  Report r = sample();
  r.label = "quote \" and backslash \\";
  const auto path = temp("trace.json");
  write_chrome_trace(r, path.string());
  const std::string json = read(path);
  std::filesystem::remove(path);
  INFO(json);
  CHECK(contains(json, "\"traceEvents\""));
  CHECK(count(json, "\"ph\":\"X\"") == r.ops.size());
  CHECK(count(json, "\"thread_name\"") == 4);  // H2D, H2D #2, stage 0, D2H
  CHECK(contains(json, "\"chunk\":1"));
  CHECK(contains(json, "\"queue\":\"stream 1\""));
  CHECK(contains(json, "\"bytes\":1000000"));
  CHECK(contains(json, "quote \\\" and backslash \\\\"));
  // Balanced braces and brackets outside strings.
  int braces = 0, brackets = 0;
  bool in_string = false, ok = true;
  for (std::size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    braces += (c == '{') - (c == '}');
    brackets += (c == '[') - (c == ']');
    ok = ok && braces >= 0 && brackets >= 0;
  }
  CHECK(ok);
  CHECK(!in_string);
  CHECK(braces == 0);
  CHECK(brackets == 0);
}

TEST_CASE("the SVG has one rect per op, row labels and a title", "[report]") {
  const Report r = simulate(Policy::slot_streams, 2, map_workload(std::size_t{1} << 28, 16 << 20, 43.7),
                            machines::t4_pcie3());
  const auto path = temp("timeline.svg");
  write_svg(r, path.string());
  const std::string svg = read(path);
  std::filesystem::remove(path);
  CHECK(starts_with(svg, "<svg "));
  CHECK(contains(svg, "</svg>"));
  CHECK(count(svg, "<rect class=\"op\"") == r.ops.size());
  CHECK(contains(svg, ">H2D</text>"));
  CHECK(contains(svg, ">stage 0</text>"));
  CHECK(contains(svg, ">D2H</text>"));
  CHECK(contains(svg, "(predicted)"));
  CHECK(contains(svg, "efficiency"));
}

TEST_CASE("writing to a path that cannot be written throws pipeline_error", "[report][errors]") {
  const Report r = sample();
  const std::string missing = "/nonexistent-chunkpipe-dir/out";
  REQUIRE_THROWS_AS(write_chrome_trace(r, missing + ".json"), pipeline_error);
  REQUIRE_THROWS_AS(write_svg(r, missing + ".svg"), pipeline_error);
  const std::string dir = std::filesystem::temp_directory_path().string();
  REQUIRE_THROWS_AS(write_svg(r, dir), pipeline_error);  // a directory
  try {
    write_svg(r, missing + ".svg");
  } catch (const pipeline_error& e) {
    CHECK(contains(e.what(), missing + ".svg"));
    CHECK(contains(e.what(), "No such file"));
  }
}

TEST_CASE("a spread run's report draws one row set per member", "[report][spread]") {
  Report r = sample();
  r.devices = {"m0 (device 0)", "m1 (device 1)"};
  // Chunk 1 ran on member 1: its ops get that member's rows.
  for (TimedOp& op : r.ops) op.device = op.chunk == 1 ? 1 : 0;
  const std::string text = ascii_timeline(r, 50);
  INFO(text);
  const std::vector<std::string> lines = lines_of(text);
  REQUIRE(lines.size() >= 7);
  // Member by member, each in data-flow order, and no second lane: the
  // overlapping copies in are on different members now.
  CHECK(starts_with(lines[1], "m0 (device 0) H2D "));
  CHECK(starts_with(lines[2], "m0 (device 0) stage 0 "));
  CHECK(starts_with(lines[3], "m0 (device 0) D2H "));
  CHECK(starts_with(lines[4], "m1 (device 1) H2D "));
  CHECK(starts_with(lines[5], "m1 (device 1) stage 0 "));
  CHECK(starts_with(lines[6], "m1 (device 1) D2H "));
  CHECK(!contains(text, "#2"));
  CHECK(lines[1].find('1') == std::string::npos);
  CHECK(lines[4].find('0', std::string("m1 (device 1) H2D ").size()) == std::string::npos);

  // The table names the members and counts each kind's busy time once.
  std::ostringstream table;
  table << r;
  INFO(table.str());
  CHECK(contains(table.str(), "over 2 members: m0 (device 0), m1 (device 1)"));
  CHECK(count(table.str(), "H2D ") == 1);
  CHECK(contains(table.str(), "H2D 3.000 ms"));  // [0, 2] on one, [1, 3] on the other: their union

  const auto svg_path = temp("spread.svg");
  write_svg(r, svg_path.string());
  const std::string svg = read(svg_path);
  CHECK(contains(svg, ">m1 (device 1) stage 0<"));
  std::filesystem::remove(svg_path);
}
