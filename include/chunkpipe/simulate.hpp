// SPDX-License-Identifier: MIT
/// \file
/// The simulator: runs a plan against a model of the machine and predicts its
/// timeline, without a GPU. Host-only C++, no CUDA.
///
/// The model: the GPU has an H2D copy engine, a D2H copy engine and the SMs,
/// and they work at the same time; what serialises work is the plan's
/// queues and waits, not the hardware. A copy costs latency + bytes /
/// bandwidth, and when both directions run at once they share the link's
/// two-way bandwidth, which on PCIe is less than the sum of the two one-way
/// figures. A kernel costs its elements times a per-element time. That is
/// enough for the arithmetic of chunked pipelines: a serial schedule costs
/// the sum of the stages, a deep pipeline costs fill + N x the slowest stage
/// + drain, and a two-slot double buffer (two streams, each running its own
/// chunks copy in, kernel, copy out) costs about half the serial chain, not
/// the slowest stage.
///
/// A kernel's last wave leaves SMs idle (Machine::kernel_tail_elems): the
/// next kernel of its stream waits for it, a kernel of another stream may
/// start (kernel lanes, slot_streams), which is the whole difference
/// between one kernel stream and several for a compute-bound stage.
///
/// The host issues device ops one after another (Machine::host_issue_us),
/// and no op starts before it is issued.
///
/// What it leaves out: caches, clocks, host work beyond issuing (events
/// waited on by host threads cost nothing there), and kernels that share
/// the SMs otherwise; apart from tails, one kernel has the SMs at a time.
#pragma once

#include <chunkpipe/detail/linkage.hpp>
#include <chunkpipe/errors.hpp>
#include <chunkpipe/plan.hpp>
#include <chunkpipe/report.hpp>

#include <cstddef>
#include <vector>

namespace chunkpipe {

/// A machine to simulate on.
struct Machine {
  /// Bandwidths, two-way total, per-copy latency and the number of copy
  /// engines (1: H2D and D2H share one and never overlap).
  LinkModel link;
  /// One host thread's memcpy rate in GB/s, for host-in and host-out
  /// staging ops; 0 means unknown, and plans that stage are then refused.
  double host_copy_gbps = 0.0;
  /// Fixed cost of every op (copy, kernel or host copy) in microseconds.
  double op_overhead_us = 0.0;
  /// A kernel's tail: the time its last wave, partly filled, adds to the
  /// kernel, as the time this many elements take at its stage's
  /// per-element time (as many as the kernel has, if fewer). A kernel of
  /// another stream may start during it; one of its own stream waits for
  /// it. Stage times per element are then those of a kernel without it (a
  /// long kernel's, over many waves). 0: no tail, every kernel has the SMs
  /// to itself to its end.
  double kernel_tail_elems = 0.0;
  /// Host time to issue one device op (a copy or a kernel with its waits
  /// and events), in microseconds: one thread issues them in plan order,
  /// and an op cannot start before it is issued. That is what bounds small
  /// chunks: at a 64 KiB window issuing a chunk takes several times as long
  /// as its copies (benchmarks/RESULTS.md, "CUDA graphs"). 0: the host is
  /// never the limit.
  double host_issue_us = 0.0;
  /// The storage a file Source reads and a file Sink writes, in GB/s for
  /// the host's team of threads together (measure_storage() in storage.hpp):
  /// the host-in ops of a Workload::in_from_storage and the host-out ops of
  /// a Workload::out_to_storage cost their bytes at these rates instead of
  /// host_copy_gbps. The write rate is one that includes the fsync at the
  /// end, as a durable file_sink pays it. 0: unknown, and such workloads
  /// are refused.
  double storage_read_gbps = 0.0;
  double storage_write_gbps = 0.0;  ///< the write rate, fsync included (see storage_read_gbps)
};

/// The work a plan's ops do.
struct Workload {
  std::size_t elems = 0;              ///< elements in the run
  std::size_t chunk_elems = 0;        ///< elements per chunk; the last may be short
  std::size_t in_bytes_per_elem = 4;  ///< over all inputs (saxpy's x and y: 8)
  std::size_t out_bytes_per_elem = 4; ///< over all outputs, per output record
  std::vector<double> stage_ns_per_elem;  ///< kernel time per element, one per stage
  /// Input elements per output record: 1 for element-wise stages; a
  /// Reduce's segment, or chunk_elems for a per-chunk stage, whose copies
  /// out carry only ceil(elems / out_per_record) records.
  std::size_t out_per_record = 1;
  /// For a plan whose last stage emits a count (PlanShape::variable_out,
  /// a Filter): the share of elements it keeps, 0 to 1. Its host-out ops
  /// then wait for a DMA of that many elements at the link's D2H rate (as
  /// into a pinned output; the DMA's share of the link with copies in is
  /// not modelled), and its copies out carry only the count.
  double out_kept = 1.0;
  /// The input is read from storage (a file_source): its host-in ops cost
  /// Machine::storage_read_gbps. The plan must stage its input.
  bool in_from_storage = false;
  /// The output is written to storage (a file_sink): its host-out ops cost
  /// Machine::storage_write_gbps. The plan must stage its output.
  bool out_to_storage = false;
};

/// Predicts how `plan` runs `work` on `machine`.
///
/// An op starts once the op before it on its queue and every op it waits
/// for have finished, and its resource is free: the H2D engine, the D2H
/// engine (one shared engine when link.copy_engines == 1), the SMs (one
/// kernel at a time) or its host queue's thread. A resource serves ops in
/// the order they became ready, ties to the lower op id. Copies in opposite
/// directions share the link as a fluid: their rates are recomputed
/// whenever a copy starts or ends. Ops of chunks past the end of the run
/// take no time.
///
/// A plan of several runs (make_plan with a list of RunSpec) sizes each
/// chunk from its own run's elements (RunSpec::elems; 0 means full chunks)
/// and ignores work.elems: that is how a stream of runs is predicted.
///
/// Returns a Report with predicted = true and the machine's link, so
/// floor_ms() and efficiency() work on it. Never blocks. Throws
/// config_error when the workload does not fit the plan (stage count,
/// too few chunks, chunk_elems 0), when a figure is negative or not finite,
/// when the link's bandwidths are not above 0, when the plan stages
/// through the host and host_copy_gbps is not known (or the storage's
/// rate, for a workload read from or written to storage), or when the plan is
/// malformed (ids out of order, a wait on an op not issued before it).
Report simulate(const Plan& plan, const Workload& work, const Machine& machine);

/// Builds the plan for `policy` and `depth` (resolve()d: automatic becomes
/// stage_streams, depth 0 the default) with one stage per entry of
/// work.stage_ns_per_elem, no host staging, and enough chunks of
/// work.chunk_elems for work.elems, then simulates it. It does not split
/// the window into grains as a pipeline's automatic policy does: to predict
/// that, pass the policy, depth and chunk_elems of the pipeline's
/// geometry() (ChunkedPipeline::geometry(), which has resolved them). Throws
/// what resolve(), make_plan() and simulate() throw.
Report simulate(Policy policy, int depth, const Workload& work, const Machine& machine);

/// What spreading one run over several devices (SpreadPipeline) is
/// predicted to do: simulate_spread().
struct SpreadPrediction {
  double makespan_ms = 0.0;          ///< the whole run
  double device_ms = 0.0;            ///< the members' part: the last piece's end
  double host_ms = 0.0;              ///< the host's memcpy share (staging): 0 for pinned runs
  bool host_bound = false;           ///< host_ms, not the devices, set the makespan
  std::vector<std::size_t> pieces;   ///< pieces each member took, in member order
  std::vector<double> busy_ms;       ///< when each member's last piece ends (0: took none)
  /// When each run completes, in queue order (one entry for one run): its
  /// last piece's end, or the run's before it where that is later (runs
  /// complete in order). Device time only: the host's share bounds
  /// makespan_ms alone.
  std::vector<double> run_end_ms;
};

/// What else shapes a spread's runs besides the members' machines
/// (simulate_spread's second form).
struct SpreadShape {
  /// Runs queued one after another (run_async), each this many elements,
  /// in queue order; empty: one run of work.elems. work.elems is then
  /// ignored.
  std::vector<std::size_t> runs;
  /// Whether a run continues the one before it (ranges or a Source in and
  /// ranges out, a Filter's, Emit's, Reduce's or Accumulate's included:
  /// its pieces go to members while the earlier run's are in flight), or
  /// starts once it is complete (a Sink's run, or a profiled one: every
  /// member starts it afresh).
  bool flows = true;
  /// Each member's device (Options::devices); members that list the same
  /// one share its link and its GPU, so their pieces take turns on one
  /// timeline (the members' machines must then be equal). Empty: every
  /// member has a device of its own.
  std::vector<int> devices;
  double staged_bytes_per_elem = 0.0;  ///< host bytes an element staged through the host's memcpy (0: pinned)
  double host_memcpy_gbps = 0.0;       ///< the host's memcpy rate for all members together (needed when staged)
};

/// Predicts a run of `work` (all of it: work.elems) spread over one member
/// pipeline per entry of `members` (each that device's machine), each
/// scheduling `policy`/`depth` over chunks of work.chunk_elems, the run cut
/// into pieces of `piece_elems` (a multiple of work.chunk_elems; the last
/// may be short) handed out in order to whichever member is free first,
/// ties to the lower index, as members take pieces when they have room. A
/// member's first piece costs what one run of it does; each later one the
/// time one more run adds behind a full piece (simulated as two runs in a
/// row), since a member overlaps its pieces as a pipeline overlaps
/// back-to-back runs. Members are independent machines: each has its own
/// link (one device listed twice shares one, which this does not model).
/// Staging: `staged_bytes_per_elem` host bytes per element go through the
/// host's memory copies (0: pinned ranges), at `host_memcpy_gbps` in total
/// for all members together, which bounds the run from below. Never
/// blocks; deterministic. Throws config_error for no members, a piece that
/// is not a whole number of chunks, a run of 0 elements, staging without a
/// host rate, and what simulate() throws.
SpreadPrediction simulate_spread(Policy policy, int depth, const Workload& work, const std::vector<Machine>& members,
                                 std::size_t piece_elems, double staged_bytes_per_elem = 0.0,
                                 double host_memcpy_gbps = 0.0);

/// The same for several runs queued on one spread, and for members that
/// share a device (`shape`). Flowing runs are one sequence of pieces, each
/// run's last piece short where its length is not a whole number of
/// pieces, handed out as for one run; runs that do not flow each start once
/// every member is done with the run before, each member's first piece of
/// it costing what a run alone does. Members on one device share one
/// timeline: a piece starts there when the piece before it on that device
/// leaves room (one pipeline's back-to-back runs), and they take the pieces
/// in turn. The staged host bytes of every run bound the makespan as for
/// one run. Never blocks; deterministic. Throws config_error as the first
/// form does (for a run of 0 elements too), for devices not one per
/// member, and for members of one device with different machines.
SpreadPrediction simulate_spread(Policy policy, int depth, const Workload& work, const std::vector<Machine>& members,
                                 std::size_t piece_elems, const SpreadShape& shape);

/// A workload of one element-wise stage: `elems` elements, cut into chunks
/// of `chunk_elems` (the last may be short), whose kernel takes `kernel_ms`
/// over all `elems` (a "kernel only" pass over the whole array, as timed on
/// the device), so each element costs kernel_ms / elems. Each element copies
/// `in_bytes_per_elem` in and `out_bytes_per_elem` out (a float to float Map:
/// 4 and 4). Pass the result to simulate() with a one-stage plan. Throws
/// config_error for elems or chunk_elems of 0, or a kernel_ms that is
/// negative or not finite.
Workload map_workload(std::size_t elems, std::size_t chunk_elems, double kernel_ms,
                      std::size_t in_bytes_per_elem = 4, std::size_t out_bytes_per_elem = 4);

/// Machine models named for their hardware, with where their figures come
/// from. Figures that were not measured are marked as assumed in the
/// definitions (detail/simulate.inl).
namespace machines {

/// An NVIDIA H200 on PCIe Gen5 x16: the link's bandwidths, one way and
/// both ways at once, as measured with pinned memory on the project's H200
/// test machine (benchmarks/RESULTS.md, "The lesson's benchmark
/// (examples/double_buffer)"); asyncEngineCount 3. Kernel tails and the
/// host's issue cost measured there too (benchmarks/RESULTS.md, "Kernel
/// lanes"); detail/simulate.inl gives each figure and says how it was
/// chosen. Per-copy latency, per-op overhead and the host copy rate are
/// assumed until measured.
Machine h200_pcie5();

/// An NVIDIA Tesla T4 on PCIe Gen3 x16. Bandwidths from a published
/// benchmark table's one-way passes ("h2d only", "d2h only") over 1 GiB of
/// pinned memory in 64 MiB chunks: the table of the double-buffering lesson
/// that examples/double_buffer.cu rebuilds (detail/simulate.inl gives the
/// figures); asyncEngineCount 3. No two-way figure was measured, so both
/// directions at once are assumed to get the sum; latency and overhead are
/// 0 because the passes' times already include them. Host staging is not
/// modelled (host_copy_gbps 0).
Machine t4_pcie3();

}  // namespace machines

}  // namespace chunkpipe

#if CHUNKPIPE_HEADER_ONLY
#include <chunkpipe/detail/simulate.inl>
#endif
