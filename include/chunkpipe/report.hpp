// Reports: what happened in a run (measured with CUDA events) or what the
// simulator predicts for a plan, in one type, so the same writers draw both.
// Host-only C++, no CUDA.
#pragma once

#include <chunkpipe/plan.hpp>

#include <cstddef>
#include <iosfwd>
#include <string>
#include <vector>

namespace chunkpipe {

/// One operation with its start and end.
struct TimedOp {
  std::size_t id = 0;         ///< op id in the plan (issue order)
  std::size_t chunk = 0;
  OpKind kind = OpKind::h2d;
  int stage = -1;             ///< stage index when kind == OpKind::stage
  int slot = 0;
  int queue = 0;              ///< index into Report::queues
  double start_ms = 0.0;      ///< from the start of the run
  double end_ms = 0.0;
  std::size_t bytes = 0;      ///< bytes the op moved (0 for stages)
  std::size_t elems = 0;      ///< elements of its chunk
};

/// A link between host and device: one-way and two-way bandwidths and the
/// fixed cost of one copy. GB/s are 1e9 bytes per second.
struct LinkModel {
  std::string name;
  double h2d_gbps = 0.0;
  double d2h_gbps = 0.0;
  double both_gbps = 0.0;     ///< total when both directions run at once
  double latency_us = 0.0;    ///< per copy
  int copy_engines = 2;       ///< 1: H2D and D2H share one engine and never overlap
};

/// A measured or predicted run.
struct Report {
  bool predicted = false;     ///< true when the simulator made it
  std::string label;          ///< e.g. "stage_streams, depth 3" or a machine's name
  Policy policy = Policy::serial;
  int depth = 1;
  std::size_t chunk_elems = 0;
  std::size_t chunks = 0;
  std::size_t elems = 0;
  std::size_t bytes_in = 0;   ///< bytes copied host to device
  std::size_t bytes_out = 0;  ///< bytes copied device to host
  std::vector<Queue> queues;
  std::vector<TimedOp> ops;
  /// The link the floor is computed against; bandwidths of 0 mean unknown,
  /// and then no floor or efficiency is shown.
  LinkModel link;
};

}  // namespace chunkpipe
