// SPDX-License-Identifier: MIT
// The host backend's executor, whatever the stages: issued ops join a graph
// of what may run (queue order and waits, across every run in flight), and
// a seeded random walk over it runs them: any op whose queue predecessor
// and waits are done may go next, now and then while ops are still being
// issued. A plan missing an edge therefore gives wrong output for some
// seed, which is how CI tests data movement, ragged tails, staging and
// back-to-back runs end to end. Copies are memcpy; a stage op calls the
// function its issuer gave it (HostExecutor, host_executor.hpp: the only
// part that knows the stages). Slot buffers are poisoned when allocated, so
// an op that reads a buffer nothing wrote produces garbage rather than a
// lucky zero. They come from the program's MemoryResources where it gave
// them (Options::device_memory for the arena that stands for device
// memory, Options::pinned_memory for the pinned one), else from operator
// new. Host-only C++, no CUDA; not a template, so a program compiles it
// once (and chunkpipe::compiled, not at all: detail/linkage.hpp).
#pragma once

#include <chunkpipe/errors.hpp>
#include <chunkpipe/memory_resource.hpp>
#include <chunkpipe/plan.hpp>
#include <chunkpipe/report.hpp>
#include <chunkpipe/detail/completion.hpp>
#include <chunkpipe/detail/driver.hpp>
#include <chunkpipe/detail/host_ops.hpp>
#include <chunkpipe/detail/linkage.hpp>
#include <chunkpipe/detail/resource_buffer.hpp>
#include <chunkpipe/detail/slots.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace chunkpipe::detail {

/// What a positional Source's chunk is cut into on the host backend: parts
/// as a team of three threads would cut them, run in turn, so that the CPU
/// suite covers the cutting.
inline constexpr std::size_t positional_parts = 3;

/// One run on the host backend: what its ops read and write, how it ends.
struct HostRun {
  std::shared_ptr<const Endpoints> ends;
  RunCompletion completion;
  std::size_t first_chunk = 0;  ///< the run's chunk 0 in the schedule
  RunLabel label;               ///< what its stages' contexts number chunk 0 (driver.hpp)
  // Changed under the engine's lock, read without it by HostTicket::ready().
  std::atomic<std::size_t> pending{0};  ///< ops issued and not yet run
  std::atomic<bool> issued{false};      ///< every op has been issued
  bool source_ended = false;    ///< its Source returned a short chunk
  std::size_t elems = 0;        ///< elements moved (learned from a Source)
  std::size_t chunks = 0;       ///< chunks that held elements

  // Profiling (Options::profile), on the host's steady clock. `profile`,
  // `report`'s header and the clocks are set before the run's first op
  // runs; `timed` grows as its ops run (under the engine's lock), in the
  // order they ran; build_report() turns it into `report` once none is left.
  bool profile = false;
  std::chrono::steady_clock::time_point origin;      ///< the run's start: its ops are timed from here
  std::chrono::steady_clock::time_point clock_zero;  ///< its pipeline's profiling clock (Report::clock_ms)
  std::vector<TimedOp> timed;
  Report report;

  bool failed() const noexcept { return completion.failed(); }
  bool ready() const noexcept { return issued && pending == 0; }

  /// Fills `report` from the ops timed, once, after every op of the run
  /// has run (HostTicket::wait(), before the run concludes). Does nothing
  /// for a run that is not profiled, failed, or still has ops to run (the
  /// report is then never shown). Safe from several threads.
  void build_report();

 private:
  std::once_flag report_once_;
};

/// A HostRun as the driver and the executor pass it: the executor's graph
/// keeps each run alive until its last op has run.
struct HostRunRef {
  std::shared_ptr<HostRun> run;
  bool failed() const noexcept { return run->failed(); }
};

/// The host backend's stand-ins for a pipeline's device and pinned slots:
/// host memory laid out as the GPU's would be.
class HostSlots {
 public:
  /// Memory comes from `device_memory` and `pinned_memory` where they are
  /// set (Options), else from operator new.
  HostSlots(std::shared_ptr<MemoryResource> device_memory, std::shared_ptr<MemoryResource> pinned_memory)
      : device_memory_(std::move(device_memory)), pinned_memory_(std::move(pinned_memory)) {}
  HostSlots(const HostSlots&) = delete;  // memory() points into it
  HostSlots& operator=(const HostSlots&) = delete;

  /// Gives the old slots back, then lays out `layout`'s, poisoned. Throws
  /// what allocating them throws (ResourceBuffer, std::bad_alloc): then
  /// memory() is empty until a lay_out() succeeds.
  void lay_out(const SlotLayout& layout);
  const SlotLayout& layout() const noexcept { return layout_; }
  const SlotMemory& memory() const noexcept { return mem_; }

 private:
  std::shared_ptr<MemoryResource> device_memory_, pinned_memory_;  // null: operator new
  ResourceBuffer device_, pinned_;
  SlotLayout layout_;
  SlotMemory mem_;
};

/// See the top of this file. Not thread-safe: its engine's lock covers it.
class HostOpGraph {
 public:
  /// Runs stage op.stage of `stages` (what the issuer handed over) on its
  /// slots; run_chunk and offset are what the stage's context says.
  using StageFn = void (*)(void* stages, const Op&, const Step&, const SlotMemory&, std::size_t run_chunk,
                           std::size_t offset, std::size_t count);

  /// `stages` goes to every StageFn as it is. A seed of 0 runs ops in issue
  /// order among those ready; any other, in a random order it repeats.
  HostOpGraph(void* stages, std::uint64_t seed, std::shared_ptr<MemoryResource> device_memory,
              std::shared_ptr<MemoryResource> pinned_memory)
      : stages_(stages), slots_(std::move(device_memory), std::move(pinned_memory)), rng_(seed), seed_(seed) {}
  HostOpGraph(const HostOpGraph&) = delete;
  HostOpGraph& operator=(const HostOpGraph&) = delete;

  void set_seed(std::uint64_t seed) {
    seed_ = seed;
    rng_.seed(seed);
  }
  std::uint64_t seed() const noexcept { return seed_; }

  /// Starts over with a schedule's tables and a slot layout; nothing may be
  /// in flight. The old slots are given back first; the new are poisoned.
  /// Throws what allocating them throws (ResourceBuffer, std::bad_alloc):
  /// then the executor holds no slots, and needs another reset().
  void reset(const std::vector<Step>& steps, std::size_t queues, const SlotLayout& layout);
  const SlotLayout& layout() const noexcept { return slots_.layout(); }

  void begin_run(HostRunRef& ref, std::size_t first_chunk);
  /// The next profiled run starts the profiling clock again
  /// (Report::clock_ms); runs already begun keep theirs.
  void restart_clock() noexcept { clock_started_ = false; }
  /// Runs ready ops until host op `id` (issued earlier) has run. Throws
  /// pipeline_error for a cycle.
  void wait_host(std::size_t id);
  void end_run(HostRunRef& ref, const PlanRun&) { ref.run->issued = true; }
  /// Runs ops until `run` has none left. Throws pipeline_error for a cycle.
  void finish(const HostRun& run);
  /// Runs every op issued.
  void drain();
  /// Every op issued since the last reset(), in issue order.
  std::vector<Op> issued_ops() const;

 protected:
  /// Adds `op` (ids in issue order) to the graph; a stage op runs `stage`.
  void issue_op(const Op& op, const OpWork& w, HostRunRef& ref, StageFn stage);

 private:
  static constexpr std::size_t none = static_cast<std::size_t>(-1);

  struct Entry {
    Op op;
    OpWork work;
    std::shared_ptr<HostRun> run;
    StageFn stage = nullptr;
    std::vector<std::size_t> next;
    std::size_t pending = 0;
    bool done = false;
  };

  void after(std::size_t before, std::size_t id);
  // Runs one ready op; false if none is ready.
  bool step();
  void execute(Entry& e);

  void* stages_;
  std::vector<Step> steps_;
  HostSlots slots_;
  std::vector<Entry> ops_;        // [op id]
  std::vector<std::size_t> tail_; // [queue]: its last op
  std::vector<std::size_t> ready_;
  std::vector<Copy> scratch_;
  std::mt19937_64 rng_;
  std::uint64_t seed_;
  // The profiling clock's zero (Report::clock_ms), kept across reset().
  std::chrono::steady_clock::time_point clock_zero_;
  bool clock_started_ = false;
};

}  // namespace chunkpipe::detail

#if CHUNKPIPE_HEADER_ONLY
#include <chunkpipe/detail/host_op_graph.inl>
#endif
