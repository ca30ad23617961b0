// SPDX-License-Identifier: MIT
/// \file
/// The plan: a pipeline's schedule as plain data. Host-only C++, no CUDA.
///
/// A plan lists, in the order they are issued, the operations every chunk
/// goes through (host-in, H2D, each stage, D2H, host-out), each with the slot
/// whose buffers it uses, the queue it runs on (a CUDA stream or a host worker
/// thread) and the earlier operations on other queues it must wait for.
/// Operations on one queue run in issue order; that and the waits are the only
/// ordering there is. Because a plan is data it can be printed, checked for
/// hazards (hazards.hpp), simulated (simulate.hpp) and executed, on the GPU
/// (pipeline.cuh) or on the CPU (host_backend.hpp), all from the same ops.
///
/// Policies decide only which queue each operation runs on. The waits are not
/// written by hand: PlanBuilder derives them from which slot buffers each
/// operation reads and writes, adding a wait exactly where queue order does
/// not already order two conflicting accesses. check_hazards() then verifies
/// the result independently, from the plan's edges alone.
#pragma once

#include <chunkpipe/detail/linkage.hpp>
#include <chunkpipe/errors.hpp>

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

namespace chunkpipe {

/// How operations are spread over queues.
enum class Policy : std::uint8_t {
  /// One slot, one stream: copy in, compute, copy out, chunk after chunk. The
  /// lesson's "naive" baseline; costs the sum of the stages. Ignores depth.
  serial,
  /// One stream per slot, chunk k on stream k % depth (the lesson's double
  /// buffer at depth 2). Stream order alone protects each slot.
  slot_streams,
  /// One stream per kind of work (H2D, each stage, D2H) over a ring of
  /// `depth` slots, chained with events (the overlap guide's pipeline).
  stage_streams,
  /// Let chunkpipe choose: resolve() says what it picks.
  automatic,
};

/// What turns a plan into device work (Options::executor).
enum class Executor : std::uint8_t {
  /// Let chunkpipe choose per run: graphs for a Map-only pipeline's pinned
  /// runs of many small chunks once their shape repeats (units up to
  /// stage_graph_max_elems under stage_streams, under small_window_elems
  /// otherwise: where graphs measured faster), streams otherwise.
  automatic,
  /// CUDA streams and events, op by op, as the plan issues them
  /// (detail/stream_executor.cuh). Every run can use it.
  streams,
  /// A CUDA graph per run shape, built from the plan once, updated for new
  /// host pointers and launched as one unit (detail/graph_executor.cuh).
  /// Runs it cannot take (staged, profiled) use streams, and say why.
  graphs,
};

/// The kinds of operation a chunk goes through, in order.
enum class OpKind : std::uint8_t { host_in, h2d, stage, d2h, host_out };

/// A queue is either a CUDA stream or a host worker thread.
enum class QueueKind : std::uint8_t { device, host };

/// Depth used when the caller leaves it at 0. Three slots is the least that
/// lets copy-in, compute and copy-out of three chunks run at once.
inline constexpr int default_depth = 3;

/// What the planner needs to know about a pipeline.
struct PlanShape {
  int stages = 1;               ///< number of stages between H2D and D2H
  std::vector<bool> in_place;   ///< per stage: writes the buffer it reads
  bool stage_in = false;        ///< inputs pass through pinned slots (host_in ops)
  bool stage_out = false;       ///< outputs pass through pinned slots (host_out ops)
  /// Each run says for itself whether it stages (RunSpec), and stage_in and
  /// stage_out are ignored: the step table then holds both forms of each
  /// copy, direct and through a pinned slot. A pipeline's lifetime schedule
  /// is built this way, since one run may be pinned and the next pageable.
  bool per_run_staging = false;
  /// The last stage emits a count the device decides (a Filter): its
  /// copy out (d2h) moves only that count, to the slot's pinned buffer,
  /// and the host-out op that reads it copies out what was emitted, from
  /// the device buffer, so it reads that buffer too. Every run stages out.
  bool variable_out = false;
  /// stage_streams: streams per stage. Chunk c's op of each stage runs on
  /// lane c % kernel_lanes, so kernels of consecutive chunks may run at
  /// once: a compute-bound kernel leaves SMs idle at its tail, which the
  /// next chunk's kernel can fill. Copies keep one stream per direction.
  /// Other policies ignore it. At least 1.
  int kernel_lanes = 1;
  /// Runs may take fewer of those lanes (RunSpec::kernel_lanes), as a
  /// pipeline that decides its lanes after calibrating does. Costs an event
  /// on stage ops whose next lap is a stage op, since that op may be on any
  /// lane; without it every run takes all kernel_lanes.
  bool lanes_vary = false;
  /// Per stage: the stage carries a value from each chunk to the next (a
  /// Scan's running prefix). Its ops then read and write a buffer that is
  /// one for the whole ring, "stage i carry", so that each waits for the
  /// one of the chunk before it, whichever slot or queue that used.
  /// Empty: none does.
  std::vector<bool> carries;
};

/// One queue of a plan.
struct Queue {
  QueueKind kind;    ///< a CUDA stream or a host worker thread
  std::string name;  ///< for printing: "h2d", "stage 0", "stream 1", "host in", ...
};

/// One operation of every chunk: what it does and which plan buffers of its
/// slot it reads and writes.
struct Step {
  OpKind kind;               ///< what the step does
  int stage = -1;            ///< stage index when kind == OpKind::stage
  int ahead = 0;             ///< issued this many chunks early (host_in only)
  std::vector<int> reads;    ///< indices into Plan::buffers
  std::vector<int> writes;   ///< indices into Plan::buffers
  /// h2d and d2h: the copy goes through the slot's pinned buffer (the run
  /// stages that side); false for the direct copy. Host steps: true.
  bool staged = false;
};

/// One operation of one chunk.
struct Op {
  std::size_t id = 0;        ///< position in issue order
  std::size_t chunk = 0;     ///< numbered across the runs of a schedule
  int step = 0;              ///< index into Plan::steps
  OpKind kind = OpKind::h2d; ///< what it does (its step's kind)
  int stage = -1;            ///< stage index when kind == OpKind::stage, else -1
  int slot = 0;              ///< the slot whose buffers it uses: chunk % depth
  int queue = 0;             ///< index into Plan::queues
  std::vector<std::size_t> waits;  ///< ids of earlier ops that must finish first
  /// Whether a later op may wait for this one, so an executor must record
  /// its completion (a CUDA event). Every event recorded is a command the
  /// stream processes: ops ordered by their own stream record none, and
  /// with batched waits most copies-out need none.
  bool signal = true;
};

/// Chunks of a run whose length a Source decides as it goes.
inline constexpr std::size_t unknown_chunks = static_cast<std::size_t>(-1);

/// What one run asks of a schedule.
struct RunSpec {
  /// Chunks in the run, or unknown_chunks until PlanBuilder::set_run_chunks().
  std::size_t chunks = 0;
  bool stage_in = false;    ///< the run stages inputs through pinned slots
  bool stage_out = false;   ///< the run stages outputs through pinned slots
  /// Elements in the run, 0 if not known. Only the simulator reads it (the
  /// run's last chunk may be short).
  std::size_t elems = 0;
  /// stage_streams: kernel lanes this run's chunks take turns on, 1 to the
  /// shape's kernel_lanes (its streams exist for the schedule's life) where
  /// the shape's lanes_vary is set; 0: all of them. A pipeline that decides its lanes after calibrating
  /// (decide.hpp) changes it from one run to the next; each run's chunks
  /// stay on their lanes, and the waits between runs follow from the ops
  /// as always. Other policies take only 0 or 1.
  int kernel_lanes = 0;
};

/// One run of a plan: a range of chunks and of ops, issued after every op
/// of the runs before it.
struct PlanRun {
  std::size_t first_chunk = 0;  ///< its first chunk's number (chunks are numbered across runs)
  std::size_t chunks = 0;    ///< chunks with ops beyond host-in (the last may carry no elements)
  std::size_t first_op = 0;  ///< the run's ops are ids [first_op, first_op + ops)
  std::size_t ops = 0;       ///< how many ops the run has
  bool stage_in = false;     ///< the run stages its inputs through pinned slots
  bool stage_out = false;    ///< the run stages its outputs through pinned slots
  std::size_t elems = 0;     ///< as in RunSpec; for a run a Source ended, what it produced (driver.hpp)
  int kernel_lanes = 1;      ///< the lanes its stage ops took turns on (1 but for stage_streams)
  /// Ops whose completion implies that of every op of the run: the last op
  /// of each queue the run used that no other such op waits for. A run is
  /// complete when these are; an executor records its completion after them.
  std::vector<std::size_t> tail;
};

/// A schedule: one run, or several in a row (a pipeline's runs), as data.
struct Plan {
  Policy policy = Policy::serial;    ///< the policy it follows (never automatic)
  int depth = 1;                     ///< slots in the ring
  PlanShape shape;                   ///< what it was planned for, as PlanBuilder normalised it
  std::size_t chunks = 0;            ///< chunk numbers used: the last op's chunk + 1, over all runs
  std::vector<Queue> queues;         ///< the queues; Op::queue indexes them
  std::vector<Step> steps;           ///< what every chunk goes through; Op::step indexes them
  std::vector<std::string> buffers;  ///< names of the per-slot buffers
  /// [buffer]: one buffer for the whole ring, not one per slot (a stage's
  /// carry, PlanShape::carries); every slot's ops touch the same one.
  std::vector<bool> ring_wide;
  std::vector<Op> ops;               ///< in issue order; ops[i].id == i
  std::vector<PlanRun> runs;         ///< in issue order
  /// The executor a run of this plan would use (ChunkedPipeline::plan_for);
  /// make_plan() leaves it at streams.
  Executor executor = Executor::streams;

  /// "h2d of chunk 3 (slot 0, queue h2d)": for error messages and printing.
  std::string describe(const Op& op) const;
};

/// The policy and depth a request resolves to. `automatic` becomes
/// stage_streams; depth 0 becomes default_depth; serial always has depth 1.
struct Resolved {
  Policy policy;  ///< never automatic
  int depth;      ///< at least 1; 1 for serial
};
/// Resolves `policy` and `depth` as Resolved says. Never blocks; throws
/// config_error for a negative depth.
Resolved resolve(Policy policy, int depth);

/// Ops of one issue tick, kept from tick to tick: the Op objects (and their
/// wait lists) are reused, so planning in steady state allocates nothing.
class OpBatch {
 public:
  /// Ops in the batch.
  std::size_t size() const noexcept { return size_; }
  /// True when it holds no op.
  bool empty() const noexcept { return size_ == 0; }
  /// Op `i`, below size(); not bounds-checked.
  const Op& operator[](std::size_t i) const noexcept { return ops_[i]; }
  /// The first op, for range-for; valid until the next add().
  const Op* begin() const noexcept { return ops_.data(); }
  /// One past the last op.
  const Op* end() const noexcept { return ops_.data() + size_; }
  /// Forgets the ops, keeping their storage.
  void clear() noexcept { size_ = 0; }
  /// A cleared Op at the back (its waits' storage kept).
  Op& add() {
    if (size_ == ops_.size()) ops_.emplace_back();
    Op& op = ops_[size_++];
    op.waits.clear();
    return op;
  }

 private:
  std::vector<Op> ops_;
  std::size_t size_ = 0;
};

}  // namespace chunkpipe

// PlanBuilder's parts, which use the types above: what it fixes when built,
// and the order of the ops it issued.
#include <chunkpipe/detail/plan_layout.hpp>
#include <chunkpipe/detail/plan_order.hpp>

namespace chunkpipe {

/// Builds a schedule one run and one issue tick at a time, so an executor
/// can follow it for runs whose length is not known up front (a Source that
/// ends when it ends) and for a pipeline whose runs keep coming. Chunks and
/// op ids continue from run to run; slot reuse between runs is ordered by
/// the same derived waits as inside a run, so a run's first chunk waits
/// only for its slot's previous occupant. At tick t of a run it issues, for
/// every step the run uses, the op of the run's chunk t + ahead. Memory use
/// is bounded by the depth, not by the number of chunks or runs.
class PlanBuilder {
 public:
  /// Throws config_error for depth < 1, stages < 1, an in_place list of the
  /// wrong length, or Policy::automatic (resolve() it first).
  PlanBuilder(Policy policy, int depth, PlanShape shape);

  /// The policy it plans (never automatic).
  Policy policy() const noexcept { return layout_.policy; }
  /// Slots in the ring.
  int depth() const noexcept { return layout_.depth; }
  /// The shape it plans for, normalised: in_place filled in where it was
  /// empty, stage_out set where variable_out is.
  const PlanShape& shape() const noexcept { return layout_.shape; }
  /// The queues its ops go on; Op::queue indexes them.
  const std::vector<Queue>& queues() const noexcept { return layout_.queues; }
  /// What every chunk goes through; Op::step indexes them.
  const std::vector<Step>& steps() const noexcept { return layout_.table.steps; }
  /// Names of the per-slot buffers; Step::reads and Step::writes index them.
  const std::vector<std::string>& buffers() const noexcept { return layout_.table.buffers; }
  /// [buffer]: one for the whole ring (PlanShape::carries), not per slot.
  const std::vector<bool>& ring_wide() const noexcept { return layout_.table.ring_wide; }
  /// The largest `ahead` of any step.
  int max_ahead() const noexcept { return layout_.table.max_ahead; }
  /// How many chunks one slot-reuse wait covers (stage_streams with deep
  /// rings; see detail::PlanOrder::issue()).
  std::size_t wait_batch() const noexcept { return layout_.wait_batch; }
  /// Chunks an executor must remember events for: no op waits for an op
  /// of the same step more than this many chunks before its own that a
  /// later op of that step and slot has replaced. A multiple of the depth.
  std::size_t reach() const noexcept { return layout_.reach; }
  /// Ops issued so far, over all runs: the id the next op gets.
  std::size_t issued() const noexcept { return order_.issued(); }

  /// Opens a run after every op issued so far. Its chunks follow the last
  /// chunk issued. Throws config_error if a run is open, or if the run
  /// stages a side this builder's shape does not (without per_run_staging,
  /// every run must stage exactly as the shape says).
  void begin_run(const RunSpec& spec);
  /// Whether a run is open.
  bool in_run() const noexcept { return run_.open; }
  /// The open run's first chunk number.
  std::size_t run_first_chunk() const noexcept { return run_.base; }
  /// The open run's chunk count as known now (unknown_chunks if not yet).
  std::size_t run_chunks() const noexcept { return run_.chunks; }
  /// The run's next tick (0-based within the run): its chunk run_first_chunk() + tick.
  std::size_t run_tick() const noexcept { return run_.tick; }
  /// Says how many chunks the open run has, once a Source has ended it or a
  /// failure cuts it short. Throws std::logic_error if that is more than
  /// it had, or fewer than the ticks already completed.
  void set_run_chunks(std::size_t chunks);

  /// First half of the run's next tick: appends its host-in ops (which may
  /// run ahead) and returns true, or returns false, appending nothing, once
  /// the run has no tick left. Never blocks.
  bool begin_tick(OpBatch& out);
  /// Second half of the tick begin_tick() opened: the ops of every other
  /// step for the tick's chunk. A Source's run learns between the halves
  /// whether that chunk is its last (set_run_chunks()).
  void finish_tick(OpBatch& out);
  /// Both halves: false, appending nothing, once the run has no tick left.
  bool next_tick(OpBatch& out);

  /// Appends the next tick's ops of the open run (opening a run of unknown
  /// length shaped as the PlanShape says if none is open), first lowering
  /// its chunk count to `chunk_limit` if that is lower. Returns false,
  /// appending nothing, once every chunk below the limit has been issued.
  bool next_tick(std::size_t chunk_limit, std::vector<Op>& out);

  /// Closes the open run and returns it as issued (its tail included).
  /// Throws std::logic_error if no run is open or ticks remain.
  PlanRun end_run();

 private:
  /// Where the open run is, and where the runs before it left off: the next
  /// chunk number, and whether ops ran past the last run's end.
  struct RunCursor {
    bool open = false;
    RunSpec spec;                        // as begin_run() took it
    int lanes = 1;                       // kernel lanes its chunks take turns on (RunSpec::kernel_lanes)
    std::size_t base = 0;                // chunk number of the run's tick 0
    std::size_t chunks = 0;              // as known now (unknown_chunks until set_run_chunks())
    bool truncated = false;              // set_run_chunks() lowered the count
    std::size_t tick = 0;                // the next tick
    bool tick_open = false;              // begin_tick() done, finish_tick() not yet
    std::size_t first_op = 0;            // the run's first op id
    std::size_t next_chunk = 0;          // above every chunk any op was issued for
    bool skipped = false;                // ops were issued for chunks past the last run's end
    std::vector<detail::OpAccess> tail;  // [queue]: the run's last op there

    // Which steps it uses: StepTable::active's index.
    int variant() const noexcept { return (spec.stage_in ? 1 : 0) | (spec.stage_out ? 2 : 0); }
  };

  void emit(int step, std::size_t chunk, OpBatch& out);
  void emit_chunk_steps(bool ahead, std::size_t chunk, OpBatch& out);

  detail::PlanLayout layout_;  // what construction fixed
  detail::PlanOrder order_;    // the ops issued so far, from which each next op's waits follow
  RunCursor run_;
  OpBatch compat_;  // next_tick(chunk_limit, out)'s batch, kept so that allocates nothing in steady state
};

/// The full plan for one run of `chunks` chunks. Throws what PlanBuilder throws.
Plan make_plan(Policy policy, int depth, const PlanShape& shape, std::size_t chunks);

/// The plan of several runs in a row, as a pipeline issues them: chunks
/// and slots continue from run to run. `shape.per_run_staging` lets the
/// runs stage differently. Throws what PlanBuilder throws, and config_error
/// for a run of unknown_chunks.
Plan make_plan(Policy policy, int depth, const PlanShape& shape, const std::vector<RunSpec>& runs);

/// A plan as a dependency graph, the form a CUDA graph takes: there are no
/// queues, so its edges are the only ordering there is. Node i is
/// plan.ops[i]; deps[i] lists the nodes it follows, ascending, without
/// duplicates.
struct PlanGraph {
  std::vector<std::vector<std::size_t>> deps;  ///< deps[i]: the nodes node i follows
};

/// The graph a graph executor builds from `plan`: each op depends on its
/// waits and on the op before it on its queue, so the graph orders exactly
/// what the plan's queues and waits order. Only the immediately previous op
/// of the queue is an edge; the earlier ones follow from it. Costs time and
/// memory linear in the ops and waits; never blocks. Throws
/// std::invalid_argument for a malformed plan (an op whose id is not its
/// position, whose queue is not one of plan.queues, or that waits for an op
/// not issued before it), and std::bad_alloc.
PlanGraph graph_of(const Plan& plan);

/// The policy's name: "serial", "slot_streams", "stage_streams" or "auto".
std::string_view to_string(Policy policy) noexcept;
/// The kind's name: "host-in", "h2d", "stage", "d2h" or "host-out".
std::string_view to_string(OpKind kind) noexcept;
/// The executor's name: "auto", "streams" or "graphs".
std::string_view to_string(Executor executor) noexcept;
/// Parses "streams", "graphs" or "auto"/"automatic". Throws config_error
/// naming the accepted values.
Executor parse_executor(std::string_view text);
/// Parses "serial", "slot_streams", "stage_streams" or "auto"/"automatic".
/// Throws config_error naming the accepted values.
Policy parse_policy(std::string_view text);

/// Prints the plan as a table, one op per line, waits included.
std::ostream& operator<<(std::ostream& os, const Plan& plan);

namespace detail {
/// A Plan with `builder`'s policy, depth, shape, queues, steps and buffers,
/// and no ops.
Plan plan_header(const PlanBuilder& builder);
/// A schedule's ops and runs, as issued through `builder`, as a Plan (what
/// check_hazards() and simulate() take). Chunks: the highest op's + 1.
Plan issued_plan(const PlanBuilder& builder, std::vector<Op> ops, std::vector<PlanRun> runs);
/// Issues one run of `spec` through `builder` and appends its ops and run
/// to `plan`.
void plan_run(PlanBuilder& builder, const RunSpec& spec, Plan& plan);
}  // namespace detail

}  // namespace chunkpipe

#if CHUNKPIPE_HEADER_ONLY
#include <chunkpipe/detail/plan.inl>
#endif
