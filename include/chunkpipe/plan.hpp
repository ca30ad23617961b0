// SPDX-License-Identifier: MIT
// The plan: a pipeline's schedule as plain data. Host-only C++, no CUDA.
//
// A plan lists, in the order they are issued, the operations every chunk
// goes through (host-in, H2D, each stage, D2H, host-out), each with the slot
// whose buffers it uses, the queue it runs on (a CUDA stream or a host worker
// thread) and the earlier operations on other queues it must wait for.
// Operations on one queue run in issue order; that and the waits are the only
// ordering there is. Because a plan is data it can be printed, checked for
// hazards (hazards.hpp), simulated (simulate.hpp) and executed, on the GPU
// (pipeline.cuh) or on the CPU (host_backend.hpp), all from the same ops.
//
// Policies decide only which queue each operation runs on. The waits are not
// written by hand: PlanBuilder derives them from which slot buffers each
// operation reads and writes, adding a wait exactly where queue order does
// not already order two conflicting accesses. check_hazards() then verifies
// the result independently, from the plan's edges alone.
#pragma once

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
};

/// One queue of a plan.
struct Queue {
  QueueKind kind;
  std::string name;
};

/// One operation of every chunk: what it does and which plan buffers of its
/// slot it reads and writes.
struct Step {
  OpKind kind;
  int stage = -1;            ///< stage index when kind == OpKind::stage
  int ahead = 0;             ///< issued this many chunks early (host_in only)
  std::vector<int> reads;    ///< indices into Plan::buffers
  std::vector<int> writes;   ///< indices into Plan::buffers
};

/// One operation of one chunk.
struct Op {
  std::size_t id = 0;        ///< position in issue order
  std::size_t chunk = 0;
  int step = 0;              ///< index into Plan::steps
  OpKind kind = OpKind::h2d;
  int stage = -1;
  int slot = 0;
  int queue = 0;             ///< index into Plan::queues
  std::vector<std::size_t> waits;  ///< ids of earlier ops that must finish first
  /// Whether a later op may wait for this one, so an executor must record
  /// its completion (a CUDA event). Every event recorded is a command the
  /// stream processes: ops ordered by their own stream alone (slot_streams,
  /// serial) need none, and with batched waits most copies-out need none.
  bool signal = true;
};

/// A whole schedule for a known number of chunks.
struct Plan {
  Policy policy = Policy::serial;
  int depth = 1;
  PlanShape shape;
  std::size_t chunks = 0;
  std::vector<Queue> queues;
  std::vector<Step> steps;
  std::vector<std::string> buffers;  ///< names of the per-slot buffers
  std::vector<Op> ops;               ///< in issue order; ops[i].id == i

  /// "h2d of chunk 3 (slot 0, queue h2d)": for error messages and printing.
  std::string describe(const Op& op) const;
};

/// The policy and depth a request resolves to. `automatic` becomes
/// stage_streams; depth 0 becomes default_depth; serial always has depth 1.
/// Throws config_error for a negative depth.
struct Resolved {
  Policy policy;
  int depth;
};
Resolved resolve(Policy policy, int depth);

/// Builds a plan one issue tick at a time, so an executor can follow it for
/// runs whose length is not known up front (a source that ends when it
/// ends). At tick t it issues, for every step, the op of chunk t + ahead.
/// Memory use is bounded by the depth, not by the number of chunks.
class PlanBuilder {
 public:
  /// Throws config_error for depth < 1, stages < 1, an in_place list of the
  /// wrong length, or Policy::automatic (resolve() it first).
  PlanBuilder(Policy policy, int depth, PlanShape shape);

  Policy policy() const noexcept { return policy_; }
  int depth() const noexcept { return depth_; }
  const PlanShape& shape() const noexcept { return shape_; }
  const std::vector<Queue>& queues() const noexcept { return queues_; }
  const std::vector<Step>& steps() const noexcept { return steps_; }
  const std::vector<std::string>& buffers() const noexcept { return buffers_; }
  /// The largest `ahead` of any step.
  int max_ahead() const noexcept { return max_ahead_; }
  /// How many chunks one slot-reuse wait covers (stage_streams with deep
  /// rings; see emit()).
  std::size_t wait_batch() const noexcept { return wait_batch_; }

  /// Appends to `out` the ops of the next tick whose chunk is below
  /// `chunk_limit`, in issue order. Returns false, appending nothing, once
  /// every chunk below the limit has been issued. Never blocks.
  bool next_tick(std::size_t chunk_limit, std::vector<Op>& out);

 private:
  struct Access {
    std::size_t op;
    int queue;
    std::size_t pos;                  // 1-based position on its queue
    std::vector<std::size_t> clock;   // vector clock of the op
    std::size_t chunk = 0;
    int step = 0;
    bool signal = true;               // records an event a later op may wait for
  };
  struct BufferState {
    bool has_writer = false;
    Access writer;
    std::vector<Access> readers;  // since the last write
  };

  int queue_of(const Step& step, std::size_t chunk) const;
  bool needs_event(int step, std::size_t chunk) const;
  void emit(int step, std::size_t chunk, std::vector<Op>& out);

  Policy policy_;
  int depth_;
  PlanShape shape_;
  std::vector<Queue> queues_;
  std::vector<Step> steps_;
  std::vector<std::string> buffers_;
  int max_ahead_ = 0;
  int first_device_queue_ = 0;  // queue index of the first stream
  int host_in_queue_ = -1;
  int host_out_queue_ = -1;

  std::vector<BufferState> state_;                 // [slot][buffer]
  std::vector<std::vector<Access>> recent_;        // [step][chunk % depth]: the latest op of each step
  std::size_t wait_batch_ = 1;                     // slot-reuse waits cover this many chunks
  std::vector<bool> conflicts_;                    // [step * steps + step]: their accesses to a slot conflict
  std::vector<std::vector<std::size_t>> clocks_;   // per queue: its tail's clock
  std::vector<std::size_t> queue_len_;
  std::size_t tick_ = 0;
  std::size_t next_id_ = 0;
};

/// The full plan for `chunks` chunks. Throws what PlanBuilder throws.
Plan make_plan(Policy policy, int depth, const PlanShape& shape,
               std::size_t chunks);

std::string_view to_string(Policy policy) noexcept;
std::string_view to_string(OpKind kind) noexcept;
/// Parses "serial", "slot_streams", "stage_streams" or "auto"/"automatic".
/// Throws config_error naming the accepted values.
Policy parse_policy(std::string_view text);

/// Prints the plan as a table, one op per line, waits included.
std::ostream& operator<<(std::ostream& os, const Plan& plan);

}  // namespace chunkpipe

#include <chunkpipe/detail/plan.inl>
