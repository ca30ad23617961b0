// SPDX-License-Identifier: MIT
/// \file
/// Reports: what happened in a run (measured with CUDA events) or what the
/// simulator predicts for a plan, in one type, so the same writers draw both.
/// Host-only C++, no CUDA.
#pragma once

#include <chunkpipe/detail/linkage.hpp>
#include <chunkpipe/errors.hpp>
#include <chunkpipe/plan.hpp>

#include <cstddef>
#include <iosfwd>
#include <string>
#include <vector>

namespace chunkpipe {

/// One operation with its start and end.
struct TimedOp {
  std::size_t id = 0;         ///< op id in the plan (issue order)
  std::size_t chunk = 0;      ///< Op::chunk in a prediction; in a measured run, its index in the run
  OpKind kind = OpKind::h2d;  ///< what it did
  int stage = -1;             ///< stage index when kind == OpKind::stage
  int slot = 0;               ///< the slot whose buffers it used
  int queue = 0;              ///< index into Report::queues
  double start_ms = 0.0;      ///< from the start of the run
  double end_ms = 0.0;        ///< from the start of the run
  std::size_t bytes = 0;      ///< bytes the op moved (0 for stages)
  std::size_t elems = 0;      ///< elements of its chunk
  int device = 0;             ///< a spread run's member that ran it (Report::devices); 0 otherwise
};

/// A link between host and device: one-way and two-way bandwidths and the
/// fixed cost of one copy. GB/s are 1e9 bytes per second.
struct LinkModel {
  std::string name;           ///< for printing: a machine's or device's name, or why there is no link
  double h2d_gbps = 0.0;      ///< host to device, one way; 0: unknown
  double d2h_gbps = 0.0;      ///< device to host, one way; 0: unknown
  double both_gbps = 0.0;     ///< total when both directions run at once
  double latency_us = 0.0;    ///< per copy
  int copy_engines = 2;       ///< 1: H2D and D2H share one engine and never overlap
};

/// A measured or predicted run.
struct Report {
  bool predicted = false;     ///< true when the simulator made it
  std::string label;          ///< e.g. "stage_streams, depth 3" or a machine's name
  Policy policy = Policy::serial;  ///< the schedule's policy
  int depth = 1;              ///< slots in its ring
  std::size_t chunk_elems = 0;  ///< elements per chunk (the scheduling unit)
  std::size_t chunks = 0;     ///< chunks in the run
  std::size_t elems = 0;      ///< elements in the run
  std::size_t bytes_in = 0;   ///< bytes copied host to device
  std::size_t bytes_out = 0;  ///< bytes copied device to host
  std::vector<Queue> queues;  ///< the queues its ops ran on; TimedOp::queue indexes them
  std::vector<TimedOp> ops;   ///< the ops timed (or predicted), with their start and end
  /// The link the floor is computed against; bandwidths of 0 mean unknown,
  /// and then no floor or efficiency is shown. A name with bandwidths of 0
  /// says why there is no link (a host-backend run's: its copies are
  /// memcpy), and the printed report shows "floor none (name)".
  LinkModel link;
  /// What issued the run. A run that asked for graphs (Executor::graphs)
  /// and ran on streams says why in executor_note; a profiled run always
  /// runs on streams, since it times each op with events there.
  Executor executor = Executor::streams;
  std::string executor_note;  ///< why a run that asked for graphs ran on streams; empty otherwise
  /// For a run issued after the automatic policy's calibration decided
  /// (ChunkedPipeline::decision()): why it got the kernel lanes it has.
  std::string decision;
  /// For a run whose Source reads, or whose Sink writes, at any offset (a
  /// file_source, a file_sink): how its I/O ran and where each setting came
  /// from: threads per chunk (Options::host_threads, or the default), how
  /// many chunks the reads run ahead of the copies in (the slots), and what
  /// the Source or Sink says of itself (file_source: O_DIRECT or the page
  /// cache; file_sink: write-back per chunk, fsync at the end). Empty for
  /// other runs.
  std::string io;
  /// A spread run's members, one name each ("m0 (device 0)"), which
  /// TimedOp::device indexes; pictures then draw one row set per member.
  /// Empty for a run of one pipeline.
  std::vector<std::string> devices;
  /// Where the run sits on its pipeline's profiling clock: a pipeline's
  /// profiled runs share one zero, the start of its first profiled run;
  /// this run's start (from which its ops are timed) is clock_ms after it,
  /// and clock_zero_ns is that zero on the host's steady clock (ns since
  /// its epoch), which lines up the clocks of several pipelines (a spread
  /// run's members) to within the launch latency. 0 and 0 where unknown.
  double clock_ms = 0.0;
  long long clock_zero_ns = 0;  ///< the profiling clock's zero on the host's steady clock, in ns (see clock_ms)
};

/// A graph run's plan and the edges of the CUDA graph built for it, read
/// back from CUDA (ChunkedPipeline::issued_graph(), with
/// Options::record_issued): what check_hazards(plan, graph) proves safe.
struct IssuedGraph {
  Plan plan;        ///< the plan the graph was built from
  PlanGraph graph;  ///< the graph's edges, as CUDA reports them
};

/// What a pipeline's graph executor has done so far
/// (ChunkedPipeline::graph_stats()). Times are host time on the issuing
/// thread, in ms.
struct GraphStats {
  std::size_t built = 0;      ///< graphs built and instantiated: a new run shape
  std::size_t updated = 0;    ///< runs that pointed a cached graph at new host ranges
  std::size_t replayed = 0;   ///< runs that launched a cached graph as it was
  std::size_t on_streams = 0; ///< runs Executor::graphs sent to streams (last_note says why)
  std::size_t cached = 0;     ///< executable graphs held now
  double build_ms = 0;        ///< the last build: the plan's ops added as nodes
  double instantiate_ms = 0;  ///< the last build's cudaGraphInstantiate
  double update_ms = 0;       ///< the last update: new host addresses set in every copy node, or in the one node copy kernels read them from
  bool copy_kernels = false;  ///< the last graph built copies with kernels, not copy nodes: a run whose every range moves at most 256 KiB a unit between the slots and this device's memory or mapped pinned memory
  double launch_ms = 0;       ///< the last cudaGraphLaunch
  std::string last_note;      ///< why the last run that asked for graphs used streams
};

// ---------------------------------------------------------------------------
// Figures. All are pure functions of a report: they never block and throw
// nothing but std::bad_alloc. An empty report has a makespan of 0 and every
// figure derived from it is 0.

/// Time from the earliest start to the latest end, in ms.
double makespan_ms(const Report& report);

/// How long some op of `kind` was running, in ms: the union of their
/// intervals, so two ops of one kind overlapping on different queues count
/// once. For OpKind::stage, `stage` >= 0 picks one stage; -1 takes all.
double busy_ms(const Report& report, OpKind kind, int stage = -1);

/// K: how long any kernel was running, in ms (all stages together).
double stage_ms(const Report& report);

/// True when the link's one-way bandwidths are known (both above 0), which
/// is what floor_ms() needs.
bool link_known(const LinkModel& link) noexcept;

/// The least time any schedule could take, in ms:
///   max(B_in / BW_h2d, B_out / BW_d2h, (B_in + B_out) / BW_both, K)
/// With one copy engine the two directions cannot overlap at all, so the
/// copy term becomes B_in / BW_h2d + B_out / BW_d2h. A both_gbps of 0 means
/// no two-way penalty is known (both directions at full speed). Host
/// staging (host-in, host-out) is not part of the floor. Returns 0 when the
/// link is not known.
double floor_ms(const Report& report);

/// floor / makespan, in 0..1 for a possible run; 0 when either is unknown.
double efficiency(const Report& report);

/// Sum over kinds of busy time / makespan: how many engines (host-in, H2D,
/// the SMs, D2H, host-out) were busy on average. 1.0 is a fully serial run.
double overlap(const Report& report);

/// Bytes moved over the link, in and out, per second of makespan (GB/s =
/// 1e9 B/s); 0 for an empty report.
double achieved_gbps(const Report& report);

// ---------------------------------------------------------------------------
// Pictures of a report. Rows are kinds of work (an engine: host-in, H2D,
// each stage, D2H, host-out), not queues, so the picture shows which
// hardware was idle. Where a measured run has two ops of one kind really
// running at once (two kernels sharing the SMs), the row gets a second lane.

/// Prints a compact table: label, predicted or measured, schedule and chunk
/// size, busy time per kind, makespan, floor and efficiency (when the link
/// is known), overlap and achieved GB/s. Never throws beyond the stream's
/// own exceptions.
std::ostream& operator<<(std::ostream& os, const Report& report);

/// The run as text, one row per kind of work and one glyph per chunk
/// (chunk index mod 62 as 0-9a-zA-Z) so the interleaving is visible,
/// `width` columns for the time axis (at least 20 are used), with a time
/// axis in ms and the makespan. Throws only std::bad_alloc.
std::string ascii_timeline(const Report& report, int width = 100);

/// Writes a Chrome/Perfetto trace (JSON, open with ui.perfetto.dev or
/// chrome://tracing): one thread per row, one complete ("X") event per op
/// with its chunk, slot, queue and bytes. Blocks until the file is written;
/// throws pipeline_error naming the path and the reason when it cannot be.
void write_chrome_trace(const Report& report, const std::string& path);

/// Writes the run as an SVG picture: one row per kind of work, one colour
/// per chunk, a time axis in ms and a title with the label, makespan and
/// efficiency. Blocks until the file is written; throws pipeline_error
/// naming the path and the reason when it cannot be.
void write_svg(const Report& report, const std::string& path);

}  // namespace chunkpipe

#if CHUNKPIPE_HEADER_ONLY
#include <chunkpipe/detail/report.inl>
#endif
