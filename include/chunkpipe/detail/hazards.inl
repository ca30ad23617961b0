// SPDX-License-Identifier: MIT
// Definitions for hazards.hpp. Included at its bottom; do not include directly.
#pragma once

#include <algorithm>
#include <ostream>
#include <tuple>

namespace chunkpipe {

namespace detail {

inline const char* hazard_name(Hazard::Kind kind) {
  switch (kind) {
    case Hazard::Kind::read_after_write: return "reads";
    case Hazard::Kind::write_after_read: return "overwrites";
    case Hazard::Kind::write_after_write: return "overwrites";
  }
  return "?";
}

}  // namespace detail

inline HazardReport check_hazards(const Plan& plan) {
  HazardReport report;
  const std::size_t n = plan.ops.size();
  const std::size_t queues = plan.queues.size();

  // Structure first: the edges below are only meaningful on a sane plan.
  for (std::size_t i = 0; i < n; ++i) {
    const Op& op = plan.ops[i];
    auto bad = [&](const std::string& why) {
      report.structural.push_back("op #" + std::to_string(i) + ": " + why);
    };
    if (op.id != i) bad("id is " + std::to_string(op.id) + ", expected its position");
    if (op.queue < 0 || static_cast<std::size_t>(op.queue) >= queues) bad("queue out of range");
    if (op.slot < 0 || op.slot >= plan.depth) bad("slot out of range");
    if (op.step < 0 || static_cast<std::size_t>(op.step) >= plan.steps.size()) bad("step out of range");
    for (std::size_t w : op.waits) {
      // A wait on an op issued later can never be satisfied by an executor
      // that issues in order: it would deadlock or wait on stale state.
      if (w >= i) {
        bad("waits for op #" + std::to_string(w) + ", which is not issued before it");
      } else if (!plan.ops[w].signal) {
        // An executor records no event for it: the wait would find an older one.
        bad("waits for op #" + std::to_string(w) + ", which does not signal");
      }
    }
  }
  if (!report.structural.empty()) return report;

  // Happens-before as vector clocks: clock[op][q] = how many ops of queue q
  // are complete before op ends (its own queue position included).
  std::vector<std::vector<std::size_t>> clock(n, std::vector<std::size_t>(queues, 0));
  std::vector<std::size_t> pos(n, 0);
  std::vector<std::size_t> queue_len(queues, 0);
  std::vector<std::size_t> queue_tail(queues, n);  // last op id per queue, n = none
  for (std::size_t i = 0; i < n; ++i) {
    const Op& op = plan.ops[i];
    const auto q = static_cast<std::size_t>(op.queue);
    if (queue_tail[q] != n) clock[i] = clock[queue_tail[q]];
    for (std::size_t w : op.waits) {
      for (std::size_t k = 0; k < queues; ++k) clock[i][k] = std::max(clock[i][k], clock[w][k]);
    }
    pos[i] = ++queue_len[q];
    clock[i][q] = pos[i];
    queue_tail[q] = i;
  }
  auto happens_before = [&](std::size_t a, std::size_t b) {
    return clock[b][static_cast<std::size_t>(plan.ops[a].queue)] >= pos[a];
  };

  // Replay every buffer's accesses in program order (chunk by chunk, step by
  // step), which is what the result must equal.
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return std::tie(plan.ops[a].chunk, plan.ops[a].step) < std::tie(plan.ops[b].chunk, plan.ops[b].step);
  });

  struct State {
    std::size_t writer = static_cast<std::size_t>(-1);
    std::vector<std::size_t> readers;
  };
  const std::size_t buffers = plan.buffers.size();
  std::vector<State> state(static_cast<std::size_t>(plan.depth) * buffers);
  auto flag = [&](Hazard::Kind kind, std::size_t earlier, std::size_t later, int slot, int buffer) {
    if (happens_before(earlier, later)) return;
    report.hazards.push_back({kind, earlier, later, slot, buffer});
    report.messages.push_back(plan.describe(plan.ops[later]) + ' ' + detail::hazard_name(kind) + ' ' +
                              plan.buffers[static_cast<std::size_t>(buffer)] + " of slot " +
                              std::to_string(slot) + " with nothing ordering it after " +
                              plan.describe(plan.ops[earlier]));
  };

  for (std::size_t i : order) {
    const Op& op = plan.ops[i];
    const Step& step = plan.steps[static_cast<std::size_t>(op.step)];
    const std::size_t base = static_cast<std::size_t>(op.slot) * buffers;
    for (int b : step.reads) {
      State& s = state[base + static_cast<std::size_t>(b)];
      if (s.writer != static_cast<std::size_t>(-1)) flag(Hazard::Kind::read_after_write, s.writer, i, op.slot, b);
    }
    for (int b : step.writes) {
      State& s = state[base + static_cast<std::size_t>(b)];
      if (s.writer != static_cast<std::size_t>(-1)) flag(Hazard::Kind::write_after_write, s.writer, i, op.slot, b);
      for (std::size_t r : s.readers) {
        if (r != i) flag(Hazard::Kind::write_after_read, r, i, op.slot, b);
      }
    }
    for (int b : step.reads) state[base + static_cast<std::size_t>(b)].readers.push_back(i);
    for (int b : step.writes) {
      State& s = state[base + static_cast<std::size_t>(b)];
      s.writer = i;
      s.readers.clear();
    }
  }
  return report;
}

inline std::ostream& operator<<(std::ostream& os, const HazardReport& report) {
  if (report.ok()) return os << "no hazards\n";
  for (const std::string& s : report.structural) os << "malformed plan: " << s << '\n';
  for (const std::string& s : report.messages) os << "hazard: " << s << '\n';
  return os;
}

}  // namespace chunkpipe
