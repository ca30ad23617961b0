// SPDX-License-Identifier: MIT
// The automatic policy's calibration without a GPU (calibration_state.hpp):
// which ops are timed, when a decision is due, and which later decisions
// replace the one in force.
#include <chunkpipe/detail/calibration_state.hpp>

#include "catch.hpp"

#include <cstddef>
#include <vector>

using namespace chunkpipe;
using detail::CalibrationState;
using detail::TimingRound;

namespace {

constexpr std::size_t unit = 1000;

// The device ops of chunk c of a one-stage pipeline, in issue order.
std::vector<Op> chunk_ops(std::size_t c) {
  std::vector<Op> ops(3);
  ops[0].kind = OpKind::h2d;
  ops[1].kind = OpKind::stage;
  ops[1].stage = 0;
  ops[2].kind = OpKind::d2h;
  for (Op& op : ops) op.chunk = c;
  return ops;
}

// Issues chunks [first, first + n) of `count` elements each; returns how
// many ops got a slot.
int issue(CalibrationState& s, std::size_t first, std::size_t n, std::size_t count = unit) {
  int timed = 0;
  for (std::size_t c = first; c < first + n; ++c) {
    for (const Op& op : chunk_ops(c)) timed += s.slot_for(op, count) != CalibrationState::none ? 1 : 0;
  }
  return timed;
}

Decision made_from(double ns, double gbps, int lanes = 1) {
  Decision d;
  d.chosen.geometry.kernel_lanes = lanes;
  d.measured.stage_ns_per_elem = {ns};
  d.machine.link.h2d_gbps = gbps;
  d.machine.link.d2h_gbps = gbps;
  return d;
}

}  // namespace

TEST_CASE("a timing round arms on its first whole chunk, gives each slot once and keeps that run's figures",
          "[calibrate]") {
  TimingRound r(1, unit);
  REQUIRE(r.slots() == 5 * 3);
  CHECK(r.take(chunk_ops(0)[0], unit / 2, 7, 1) == TimingRound::none);  // a short chunk does not arm it
  CHECK_FALSE(r.armed());
  const std::size_t h2d = r.take(chunk_ops(2)[0], unit, 4000, 2);
  REQUIRE(h2d != TimingRound::none);
  CHECK(r.armed());
  CHECK(r.run_elems() == 4000);  // the run it began in
  CHECK(r.lanes() == 2);
  CHECK(r.take(chunk_ops(2)[0], unit, 9000, 3) == TimingRound::none);  // once
  CHECK(r.run_elems() == 4000);
  CHECK(r.take(chunk_ops(1)[0], unit, 4000, 2) == TimingRound::none);  // before its first chunk
  CHECK(r.timed_chunks() == 1);
  CHECK_FALSE(r.passed_by(6));
  CHECK(r.passed_by(7));  // chunks 2 to 6 are the round's
  r.close();
  CHECK(r.closed());
  CHECK(r.take(chunk_ops(3)[0], unit, 4000, 2) == TimingRound::none);
  CHECK_FALSE(r.passed_by(9));
  r.rearm();
  CHECK_FALSE(r.armed());
  CHECK_FALSE(r.closed());
  CHECK_FALSE(r.used(h2d));
  CHECK(r.timed_chunks() == 0);
  CHECK(r.take(chunk_ops(8)[1], unit, 100, 1) != TimingRound::none);  // a stage op arms it too
  CHECK(r.run_elems() == 100);
}

TEST_CASE("a calibration times the first five whole chunks, each op once", "[calibrate]") {
  CalibrationState s(1, unit);
  REQUIRE(s.slots() == 5 * 3);
  CHECK_FALSE(s.due(true));                 // nothing timed yet
  CHECK(issue(s, 0, 1, unit / 2) == 0);     // a short run times nothing
  CHECK(issue(s, 1, 3) == 9);               // the first whole chunks, from chunk 1
  CHECK_FALSE(s.due(false));
  CHECK(s.due(true));                       // waited for: decides on what there is
  CHECK(issue(s, 4, 2) == 6);
  CHECK(s.due(false));                      // all five
  for (std::size_t i = 0; i < s.slots(); ++i) CHECK(s.used(i));
  // The same op again, or a later chunk, gets no slot.
  CHECK(s.slot_for(chunk_ops(3)[0], unit) == CalibrationState::none);
  CHECK(issue(s, 6, 1) == 0);
}

TEST_CASE("a ragged chunk is skipped, and a later one closes the timing", "[calibrate]") {
  CalibrationState s(1, unit);
  CHECK(issue(s, 0, 3) == 9);
  CHECK(issue(s, 3, 1, unit - 1) == 0);  // the run's ragged end
  CHECK_FALSE(s.due(false));
  CHECK(issue(s, 4, 1) == 3);  // the next run's first chunk: still within the five
  CHECK_FALSE(s.due(false));
  CHECK(issue(s, 5, 1) == 0);  // past the five: chunk 3 will never come
  CHECK(s.due(false));
}

TEST_CASE("after a decision a calibration checks again, and keeps the decision unless the work moved",
          "[calibrate]") {
  CalibrationState s(1, unit);
  issue(s, 0, 5);
  REQUIRE(s.due(false));
  CHECK_FALSE(s.decided());  // the pipeline decides before its next run while this is false
  REQUIRE(s.conclude(made_from(0.15, 50.0)));  // the first decision always stands
  CHECK(s.decided());  // from now on checks are decided after a run was issued
  CHECK_FALSE(s.due(true));
  // Nothing is timed until recheck_chunks whole chunks later; ragged ones do not count.
  std::size_t c = 5;
  CHECK(issue(s, c, CalibrationState::recheck_chunks - 1) == 0);
  c += CalibrationState::recheck_chunks - 1;
  CHECK(issue(s, c, 3, unit / 3) == 0);
  c += 3;
  CHECK(issue(s, c, 5) == 15);  // the check: five chunks again
  c += 5;
  REQUIRE(s.due(false));
  CHECK_FALSE(s.conclude(made_from(0.15 * 1.05, 50.0 * 0.95)));  // within the margin: the decision stands
  // The next check: the kernels got far cheaper, so its decision replaces it.
  CHECK(issue(s, c, CalibrationState::recheck_chunks + 4) == 15);  // 127 untimed, then five
  REQUIRE(s.due(false));
  const auto d = s.conclude(made_from(0.01, 50.0));
  REQUIRE(d);
  CHECK(d->measured.stage_ns_per_elem[0] == 0.01);
}

TEST_CASE("a decision's figures moved when a stage or either copy rate did, by more than the margin",
          "[calibrate]") {
  const Decision base = made_from(0.2, 50.0);
  const double m = CalibrationState::moved_margin;
  CHECK_FALSE(CalibrationState::moved(base, base));
  CHECK_FALSE(CalibrationState::moved(base, made_from(0.2 * (1 + m * 0.9), 50.0 * (1 - m * 0.9))));
  CHECK(CalibrationState::moved(base, made_from(0.2 * (1 + m * 1.1), 50.0)));
  CHECK(CalibrationState::moved(base, made_from(0.2, 50.0 * (1 - m * 1.1))));
  Decision d2h = base;
  d2h.machine.link.d2h_gbps *= 1.5;
  CHECK(CalibrationState::moved(base, d2h));
  Decision two = base;
  two.measured.stage_ns_per_elem.push_back(0.1);
  CHECK(CalibrationState::moved(base, two));  // another pipeline's figures
}

TEST_CASE("a calibration that failed asks for nothing again", "[calibrate][errors]") {
  CalibrationState s(2, unit);
  REQUIRE(s.slots() == 5 * 4);
  issue(s, 0, 2);
  s.fail();
  CHECK(s.failed());
  CHECK_FALSE(s.decided());
  CHECK_FALSE(s.due(true));
  CHECK(issue(s, 2, CalibrationState::recheck_chunks + 10) == 0);
  // A timed op that failed: even with a decision in force, no check comes
  // again (its events' state is not known).
  CalibrationState b(1, unit);
  issue(b, 0, 5);
  REQUIRE(b.conclude(made_from(0.2, 50.0)));
  issue(b, 5, CalibrationState::recheck_chunks + 4);
  REQUIRE(b.due(false));
  b.broken();
  CHECK(b.failed());
  CHECK(b.decided());  // the decision in force stays
  CHECK(issue(b, 200, CalibrationState::recheck_chunks + 10) == 0);
}

TEST_CASE("a check compares with figures timed on the same lanes", "[calibrate]") {
  CalibrationState s(1, unit);
  s.note_run(9000, 1);
  issue(s, 0, 5);
  REQUIRE(s.conclude(made_from(0.2, 50.0, 2)));  // timed on 1 lane: 2 lanes from now on
  std::size_t c = 5;
  auto check = [&](const Decision& d, int lanes) {
    s.note_run(9000, lanes);
    CHECK(issue(s, c, CalibrationState::recheck_chunks + 4) == 15);
    c += CalibrationState::recheck_chunks + 4;
    REQUIRE(s.due(false));
    return s.conclude(d);
  };
  // On 2 lanes the kernels share the GPU and time 80% longer; with nothing
  // timed on 2 lanes before, a check that chooses the same lanes stands...
  CHECK_FALSE(check(made_from(0.36, 50.0, 2), 2));
  // ...and is what later checks on 2 lanes compare with: like figures stand,
  CHECK_FALSE(check(made_from(0.37, 50.0, 2), 2));
  // moved ones replace it, even if they choose the same lanes.
  const auto moved = check(made_from(0.5, 50.0, 2), 2);
  REQUIRE(moved);
  CHECK(moved->measured.stage_ns_per_elem[0] == 0.5);
  // With no figures of its lanes since the work moved, only another choice
  // of lanes replaces the decision.
  CHECK_FALSE(check(made_from(0.1, 50.0, 2), 1));
  const auto fewer = check(made_from(0.01, 50.0, 1), 3);
  REQUIRE(fewer);
  CHECK(fewer->chosen.geometry.kernel_lanes == 1);
}

TEST_CASE("a check that timed fewer than three chunks starts over", "[calibrate]") {
  CalibrationState s(1, unit);
  issue(s, 0, 5);
  REQUIRE(s.conclude(made_from(0.2, 50.0)));
  std::size_t c = 5;
  CHECK(issue(s, c, CalibrationState::recheck_chunks - 1) == 0);
  c += CalibrationState::recheck_chunks - 1;
  // The check begins at a run's last whole chunk; the run ends ragged and
  // the next runs are short, so within five chunk numbers two are timed.
  CHECK(issue(s, c, 2) == 6);
  c += 2;
  CHECK(issue(s, c, 3, unit / 2) == 0);
  c += 3;
  CHECK_FALSE(s.due(false));
  // A whole chunk past them starts the round again, from itself.
  CHECK(issue(s, c, 5) == 15);
  CHECK(s.due(false));
  // A first round has no such floor: what the runs allowed is what it gets.
  CalibrationState f(1, unit);
  CHECK(issue(f, 0, 1) == 3);
  CHECK(issue(f, 1, 4, unit / 2) == 0);
  CHECK(issue(f, 5, 1) == 0);
  CHECK(f.due(false));
}

TEST_CASE("a check measures against the decision in force, and the runs it times", "[calibrate]") {
  CalibrationState s(1, unit);
  s.note_run(9000, 1);
  issue(s, 0, 5);
  REQUIRE(s.conclude(made_from(0.2, 50.0)));
  CHECK(s.run_elems() == 9000);
  std::size_t c = 5;
  auto check = [&](const Decision& d) {
    s.note_run(c * 10, 1);  // a later run, of another length
    issue(s, c, CalibrationState::recheck_chunks + 4);
    c += CalibrationState::recheck_chunks + 4;
    REQUIRE(s.due(false));
    CHECK(s.run_elems() == (c - CalibrationState::recheck_chunks - 4) * 10);  // the round's run, not the first
    return s.conclude(d);
  };
  // A creeping drift: 8% is within the margin of the decision in force,
  // 16% is not, though it is 8% from the check before.
  CHECK_FALSE(check(made_from(0.2 * 1.08, 50.0)));
  CHECK(check(made_from(0.2 * 1.16, 50.0)));
  // Each copy rate on its own.
  Decision h2d = made_from(0.2 * 1.16, 50.0);
  h2d.machine.link.h2d_gbps = 50.0 * 1.2;
  CHECK(check(h2d));
  // A check that can decide nothing (its ops failed) leaves the decision
  // in force, and the next check comes as usual.
  issue(s, c, CalibrationState::recheck_chunks + 4);
  c += CalibrationState::recheck_chunks + 4;
  REQUIRE(s.due(false));
  s.fail();
  CHECK_FALSE(s.failed());
  CHECK_FALSE(s.due(true));
  CHECK(issue(s, c, CalibrationState::recheck_chunks + 4) == 15);
}

TEST_CASE("a schedule made again starts the round of timing over", "[calibrate]") {
  CalibrationState s(1, unit);
  CHECK(issue(s, 40, 3) == 9);
  s.restart();  // chunk numbers start over at 0
  CHECK_FALSE(s.due(true));
  CHECK(issue(s, 0, 5) == 15);
  CHECK(s.due(false));
  // A partial round concluded (the pipeline was waited for), then checks as usual.
  CalibrationState p(1, unit);
  issue(p, 0, 2);
  REQUIRE(p.due(true));
  REQUIRE(p.conclude(made_from(0.2, 50.0)));
  CHECK(issue(p, 2, CalibrationState::recheck_chunks - 1) == 0);
  CHECK(issue(p, 2 + CalibrationState::recheck_chunks - 1, 5) == 15);
  p.restart();  // the check's round in progress starts over too
  CHECK_FALSE(p.due(true));
  CHECK(issue(p, 0, 5) == 15);
}
