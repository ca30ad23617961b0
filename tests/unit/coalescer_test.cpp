// SPDX-License-Identifier: MIT
// The coalescer (Options::coalesce, detail/coalescer.hpp) on the CPU: the
// class ChunkedPipeline's runner holds, driven with runs of the test's own
// and an issue callback that records what it is given instead of CUDA.
// Which runs join and which never do, the order held runs are issued in,
// the unit threshold, what makes held runs go (a run that does not
// continue them, a different shape, a wait, the work ahead finishing, a
// run of nothing, closing), a failed issue reaching every member, and two
// threads submitting at once.
// Most cases start alike: a run the device is busy with (Owner::gate),
// then small runs that continue it and are held (Owner::hold).
#include <chunkpipe/detail/coalescer.hpp>
#include <chunkpipe/detail/completion.hpp>
#include <chunkpipe/detail/front.hpp>
#include <chunkpipe/stage.hpp>

#include "catch.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <new>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace chunkpipe;
using detail::CoalesceRules;
using detail::Endpoints;

namespace {

struct Twice {
  CHUNKPIPE_HOST_DEVICE float operator()(float x) const { return 2.f * x; }
};
struct Plus {
  CHUNKPIPE_HOST_DEVICE float operator()(float a, float b) const { return a + b; }
};
struct Positive {
  CHUNKPIPE_HOST_DEVICE bool operator()(float x) const { return x > 0.f; }
};
struct InPlace {  // a ChunkFn that leaves its chunk as it is
  template <class Ctx>
  void operator()(Ctx&) const {}
};

// What a ticket asks to have its held run issued (HeldRuns on the GPU).
struct Waiter {
  virtual void issue_held() noexcept = 0;

 protected:
  ~Waiter() = default;
};

// A run as the coalescer sees it (RunState on the GPU): the "device"
// finishes it when the test sets `done`.
struct FakeRun {
  int id = -1;  // the test's number; carriers are -1
  struct Setup {
    std::shared_ptr<const Endpoints> ends;
    std::weak_ptr<Waiter> holder;
  } setup;
  struct Issue {
    std::shared_ptr<FakeRun> carrier;
    Executor executor = Executor::automatic;  // the issue callback sets streams
    std::size_t elems = 0, chunks = 0;
  } issue;
  detail::RunCompletion completion;
  std::atomic<bool> issued{false};
  std::atomic<bool> done{false};
  const std::atomic<bool>* all_done = nullptr;  // the owner's: the device finished everything

  bool failed() const noexcept { return completion.failed(); }
  void fail(std::exception_ptr e) noexcept { completion.fail(std::move(e)); }
  void mark_issued() { issued.store(true); }
  bool ready() {
    return issued.load() && (issue.carrier ? issue.carrier->ready() : done.load() || (all_done && *all_done));
  }
  // What a ticket's wait does first (RunState::issue_if_held).
  void issue_if_held() {
    if (issued.load()) return;
    if (auto h = setup.holder.lock()) h->issue_held();
  }
  // The message of the error it failed with; empty if none.
  std::string error() const {
    try {
      if (auto e = completion.error()) std::rethrow_exception(e);
    } catch (const std::exception& e) {
      return e.what();
    }
    return {};
  }
};

using Coalescer = detail::Coalescer<FakeRun>;
using RunPtr = std::shared_ptr<FakeRun>;

// One issue as the "device" saw it, in order.
struct Issued {
  int id = -1;            // the run's (-1: a carrier, -2: a job of the test's)
  char shape = 0;         // which Issue: 'a', 'b', or 'x' for a run issued by the owner alone
  std::size_t n = 0;
  std::size_t index = 0;  // the first run's number
  const std::byte* in = nullptr;
  RunPtr run;
};

// Stands in for CudaRunner: its issue callbacks, its runs, its issue
// thread, and the test's arrays (two pairs: a and b).
class Owner {
 public:
  static constexpr std::size_t size = 1 << 14;
  std::vector<float> a_in = std::vector<float>(size), a_out = std::vector<float>(size);
  std::vector<float> b_in = std::vector<float>(size), b_out = std::vector<float>(size);
  std::atomic<bool> fail_issues{false};  // every issue fails its run
  std::atomic<bool> no_carriers{false};  // new_run throws std::bad_alloc

  template <char Shape>
  static void issue(void* self, const RunPtr& run, const RunSpec& spec, std::size_t n, std::size_t index) noexcept {
    static_cast<Owner*>(self)->take(run, Shape, spec, n, index);
  }

  Coalescer::Hooks hooks() {
    Coalescer::Hooks h;
    h.owner = this;
    h.new_run = [this] {
      if (no_carriers) throw std::bad_alloc();
      return fresh(-1);
    };
    h.wait_done = [this](const RunPtr& run) { wait_done(run); };
    return h;
  }

  // A run over elements [from, from + n) of pair a (or b).
  RunPtr run(int id, std::size_t from, std::size_t n, bool pair_b = false) {
    auto e = std::make_shared<Endpoints>();
    std::vector<float>& in = pair_b ? b_in : a_in;
    std::vector<float>& out = pair_b ? b_out : a_out;
    Endpoints::In i;
    i.data = reinterpret_cast<const std::byte*>(in.data() + from);
    i.elem_size = sizeof(float);
    i.size = n;
    e->in.push_back(i);
    Endpoints::Out o;
    o.data = reinterpret_cast<std::byte*>(out.data() + from);
    o.elem_size = sizeof(float);
    o.size = n;
    e->out.push_back(o);
    RunPtr r = fresh(id);
    r->setup.ends = std::move(e);
    return r;
  }

  // The setup most cases share. The gate: run 0, elements [0, 16) of pair
  // a, which the owner rules out of joining, so it is issued at once and
  // the "device" is busy with it until the test finishes it.
  RunPtr gate(Coalescer& c) {
    RunPtr g = run(0, 0, 16);
    REQUIRE_FALSE(submit(c, g, 'a', false));
    return g;
  }
  // Then `count` runs of 8 that continue it, one after the other (runs 1,
  // 2, ... from element 16), each held.
  std::vector<RunPtr> hold(Coalescer& c, int count) {
    std::vector<RunPtr> held;
    for (int k = 0; k < count; ++k) {
      held.push_back(run(1 + k, 16 + 8 * static_cast<std::size_t>(k), 8));
      REQUIRE(submit(c, held.back()));
    }
    return held;
  }

  // What CudaRunner::start_impl does around Coalescer::submit: its own
  // issue for a run that goes alone, inline when its issue thread is idle.
  bool submit(Coalescer& c, const RunPtr& run, char shape = 'a', bool joinable_too = true, bool staged = false) {
    const std::size_t n = run->setup.ends->in[0].size;
    const bool joinable = c.rules().joinable(n, staged, false, false) && joinable_too;
    const std::size_t index = started_++;
    return c.submit(run, n, joinable, shape == 'a' ? &issue<'a'> : &issue<'b'>, index, [&] {
      if (worker.idle()) {
        take(run, 'x', RunSpec{}, n, index);
      } else {
        worker.push([this, run, n, index] { take(run, 'x', RunSpec{}, n, index); });
      }
    });
  }

  // A job of the test's on the issue thread that blocks until open() (a
  // staged run's host work, say).
  void block_worker() {
    worker.push([this] {
      std::unique_lock<std::mutex> lock(m_);
      cv_.wait(lock, [&] { return open_; });
      log_.push_back({-2, 0, 0, 0, nullptr, nullptr});
    });
  }
  void open() {
    {
      std::lock_guard<std::mutex> lock(m_);
      open_ = true;
    }
    cv_.notify_all();
  }

  // The "device" finishes `run` (and wakes the watcher).
  void finish(const RunPtr& run) {
    {
      std::lock_guard<std::mutex> lock(m_);
      run->done = true;
    }
    cv_.notify_all();
  }
  // Everything is done from now on: no watcher waits any longer.
  void finish_all() {
    {
      std::lock_guard<std::mutex> lock(m_);
      all_done_ = true;
      open_ = true;
    }
    cv_.notify_all();
  }

  std::vector<Issued> log() {
    std::lock_guard<std::mutex> lock(m_);
    return log_;
  }

  // Polls until `pred` holds, for at most ten seconds.
  template <class Pred>
  static bool eventually(Pred pred) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!pred()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  }

  detail::IssueWorker worker;  // the owner's issue thread

 private:
  // A run the "device" knows: a test's (id >= 0) or a carrier (-1).
  RunPtr fresh(int id) {
    auto r = std::make_shared<FakeRun>();
    r->id = id;
    r->all_done = &all_done_;
    return r;
  }

  void take(const RunPtr& run, char shape, const RunSpec& spec, std::size_t n, std::size_t index) noexcept {
    {
      std::lock_guard<std::mutex> lock(m_);
      log_.push_back({run->id, shape, n, index, run->setup.ends->in[0].data, run});
      (void)spec;
    }
    run->issue.executor = Executor::streams;
    if (fail_issues) run->fail(std::make_exception_ptr(std::runtime_error("the device went away")));
    run->mark_issued();
  }

  void wait_done(const RunPtr& run) {
    std::unique_lock<std::mutex> lock(m_);
    while (!all_done_ && !(run->issued && run->done)) cv_.wait_for(lock, std::chrono::milliseconds(1));
  }

  std::mutex m_;
  std::condition_variable cv_;
  std::vector<Issued> log_;
  bool open_ = false;
  std::atomic<bool> all_done_{false};
  std::atomic<std::size_t> started_{0};
};

// An owner and its coalescer (unit 64), closed before the owner goes.
struct Rig {
  explicit Rig(std::size_t unit = 64) : c(CoalesceRules{true, unit}, owner.worker, owner.hooks()) {}
  ~Rig() {
    owner.finish_all();
    c.close();
    owner.worker.wait_idle();
  }
  Owner owner;
  Coalescer c;
};

// Fronts with one trait changed at a time, for CoalesceRules::of.
template <bool Elementwise, bool Folds, bool Counted>
struct TraitsFront {
  static constexpr bool all_elementwise = Elementwise;
  static constexpr bool folds_result = Folds;
  static constexpr bool counted = Counted;
  Options o;
  Geometry g{Policy::stage_streams, 3, 1000};
  const Options& options() const noexcept { return o; }
  const Geometry& geometry() const noexcept { return g; }
};

}  // namespace

TEST_CASE("which pipelines' runs may join: Map stages, coalesce on, not profiled, not under graphs",
          "[coalesce]") {
  using detail::PipelineFront;
  using detail::Target;
  const Options o{.chunk_elems = 1 << 14};
  const PipelineFront<Map<Twice>> map(Target::device, o, Map<Twice>{});
  const CoalesceRules rules = CoalesceRules::of(map);
  CHECK(rules.enabled);
  CHECK(rules.unit == map.geometry().chunk_elems);
  using TwoMaps = PipelineFront<Map<Twice>, Map<Twice>>;
  CHECK(CoalesceRules::of(TwoMaps(Target::device, o, Map<Twice>{}, Map<Twice>{})).enabled);
  CHECK(CoalesceRules::of(PipelineFront<Map<Twice>>(Target::device, {.executor = Executor::streams}, Map<Twice>{}))
            .enabled);

  // Never: coalescing off, a profiled pipeline, Executor::graphs.
  CHECK_FALSE(CoalesceRules::of(PipelineFront<Map<Twice>>(Target::device, {.coalesce = false}, Map<Twice>{})).enabled);
  CHECK_FALSE(CoalesceRules::of(PipelineFront<Map<Twice>>(Target::device, {.profile = true}, Map<Twice>{})).enabled);
  CHECK_FALSE(
      CoalesceRules::of(PipelineFront<Map<Twice>>(Target::device, {.executor = Executor::graphs}, Map<Twice>{}))
          .enabled);
  // Never for stages that see chunks or whose output is not element-wise:
  // a ChunkFn, a Reduce (folds), a Filter (counts).
  CHECK_FALSE(CoalesceRules::of(PipelineFront<ChunkFn<InPlace>>(Target::device, o, ChunkFn<InPlace>{})).enabled);
  CHECK_FALSE(CoalesceRules::of(PipelineFront<Map<Twice>, ChunkFn<InPlace>>(Target::device, o, Map<Twice>{},
                                                                             ChunkFn<InPlace>{}))
                  .enabled);
  const Options reduce_o{.chunk_elems = 4 * default_reduce_segment};
  CHECK_FALSE(CoalesceRules::of(PipelineFront<Reduce<float, Plus>>(Target::device, reduce_o, Reduce<float, Plus>{}))
                  .enabled);
  CHECK_FALSE(CoalesceRules::of(PipelineFront<Filter<Positive>>(Target::device, o, Filter<Positive>{})).enabled);

  // Each trait on its own (no stage kind today is element-wise and folds
  // or counts, so only these tell the three apart).
  CHECK(CoalesceRules::of(TraitsFront<true, false, false>{}).enabled);
  CHECK(CoalesceRules::of(TraitsFront<true, false, false>{}).unit == 1000);
  CHECK_FALSE(CoalesceRules::of(TraitsFront<false, false, false>{}).enabled);
  CHECK_FALSE(CoalesceRules::of(TraitsFront<true, true, false>{}).enabled);
  CHECK_FALSE(CoalesceRules::of(TraitsFront<true, false, true>{}).enabled);
}

TEST_CASE("which runs may join: known, shorter than a unit, nothing on host threads, no after(), no label",
          "[coalesce]") {
  const CoalesceRules rules{true, 64};
  CHECK(rules.joinable(1, false, false, false));
  CHECK(rules.joinable(63, false, false, false));
  CHECK_FALSE(rules.joinable(0, false, false, false));               // nothing to join
  CHECK_FALSE(rules.joinable(64, false, false, false));              // a unit: it fills its own chunk
  CHECK_FALSE(rules.joinable(1000, false, false, false));
  CHECK_FALSE(rules.joinable(unknown_length, false, false, false));  // a Source decides
  CHECK_FALSE(rules.joinable(8, true, false, false));                // staged, a Source or a Sink
  CHECK_FALSE(rules.joinable(8, false, true, false));                // after(...)
  CHECK_FALSE(rules.joinable(8, false, false, true));                // a spread piece whose stages see its numbers
  CHECK_FALSE(CoalesceRules{false, 64}.joinable(8, false, false, false));
}

TEST_CASE("a small run is held only if it continues the run queued just before it, while that one runs",
          "[coalesce]") {
  Rig rig;
  Owner& o = rig.owner;
  RunPtr gate = o.gate(rig.c);  // goes alone: issued by the owner
  REQUIRE(o.log().size() == 1);
  CHECK(o.log()[0].shape == 'x');

  SECTION("held: its ticket can have it issued, and it counts as one chunk") {
    RunPtr a = o.run(1, 16, 8);
    CHECK(o.submit(rig.c, a));
    CHECK(rig.c.held_runs() == 1);
    CHECK(o.log().size() == 1);  // not issued
    CHECK_FALSE(a->issued);
    CHECK_FALSE(a->setup.holder.expired());
    CHECK(a->issue.elems == 8);
    CHECK(a->issue.chunks == 1);
  }
  SECTION("not when the run before it is done: holding it would leave the device idle") {
    o.finish(gate);
    RunPtr a = o.run(1, 16, 8);
    CHECK_FALSE(o.submit(rig.c, a));
    CHECK(a->issued);
  }
  SECTION("not when it leaves a gap, or overlaps") {
    CHECK_FALSE(o.submit(rig.c, o.run(1, 17, 8)));
    CHECK_FALSE(o.submit(rig.c, o.run(2, 20, 8)));
    CHECK(o.log().size() == 3);
  }
  SECTION("not when the owner rules it out (not joinable)") {
    CHECK_FALSE(o.submit(rig.c, o.run(1, 16, 8), 'a', false));
    CHECK_FALSE(o.submit(rig.c, o.run(2, 24, 8), 'a', true, true));  // staged
  }
  SECTION("not a double buffer's halves: each continues the run before the one before it") {
    RunPtr b_gate = o.run(1, 0, 16, true);
    CHECK_FALSE(o.submit(rig.c, b_gate, 'a', false));
    for (int k = 0; k < 4; ++k) {
      CHECK_FALSE(o.submit(rig.c, o.run(10 + 2 * k, 16 + 8 * k, 8)));
      CHECK_FALSE(o.submit(rig.c, o.run(11 + 2 * k, 16 + 8 * k, 8, true)));
    }
    CHECK(o.log().size() == 10);
    CHECK(rig.c.runs_coalesced() == 0);
  }
  CHECK(rig.c.runs_coalesced() == 0);
}

TEST_CASE("held runs are issued in order, as one carrier over their joined ranges, before a run that does not "
          "continue them",
          "[coalesce]") {
  Rig rig;
  Owner& o = rig.owner;
  o.gate(rig.c);

  SECTION("several: one carrier") {
    const std::vector<RunPtr> held = o.hold(rig.c, 3);
    CHECK(rig.c.held_runs() == 3);
    RunPtr apart = o.run(4, 0, 8, true);
    CHECK_FALSE(o.submit(rig.c, apart));
    const auto log = o.log();
    REQUIRE(log.size() == 3);
    // The gate, the carrier (numbered as the first held run), the run apart.
    CHECK(log[0].id == 0);
    CHECK(log[1].id == -1);
    CHECK(log[1].shape == 'a');
    CHECK(log[1].n == 24);
    CHECK(log[1].index == 1);
    CHECK(log[1].in == reinterpret_cast<const std::byte*>(o.a_in.data() + 16));
    const RunPtr carrier = log[1].run;
    CHECK(carrier->setup.ends->in[0].size == 24);
    CHECK(carrier->setup.ends->out[0].size == 24);
    CHECK(carrier->setup.ends->out[0].data == reinterpret_cast<std::byte*>(o.a_out.data() + 16));
    CHECK(log[2].id == 4);
    CHECK(log[2].shape == 'x');
    // Each member completes with the carrier, and learns what issued it.
    for (const auto& r : held) {
      CHECK(r->issued);
      CHECK(r->issue.carrier == carrier);
      CHECK(r->issue.executor == Executor::streams);
      CHECK_FALSE(r->ready());
    }
    o.finish(carrier);
    for (const auto& r : held) CHECK(r->ready());
    CHECK(rig.c.runs_coalesced() == 3);
    CHECK(rig.c.held_runs() == 0);
  }
  SECTION("one: issued as itself") {
    RunPtr a = o.hold(rig.c, 1)[0];
    o.submit(rig.c, o.run(2, 0, 8, true));
    const auto log = o.log();
    REQUIRE(log.size() == 3);
    CHECK(log[1].id == 1);
    CHECK(log[1].shape == 'a');
    CHECK(log[1].n == 8);
    CHECK(log[2].id == 2);
    CHECK(a->issue.carrier == nullptr);
    CHECK(rig.c.runs_coalesced() == 0);
  }
}

TEST_CASE("a unit's worth held is issued at once; a unit or more is never held", "[coalesce]") {
  Rig rig;  // unit 64
  Owner& o = rig.owner;
  o.gate(rig.c);
  std::vector<RunPtr> held{o.run(1, 16, 21), o.run(2, 37, 21), o.run(3, 58, 21)};  // 63
  for (const auto& r : held) REQUIRE(o.submit(rig.c, r));
  CHECK(rig.c.held_runs() == 3);
  CHECK(o.log().size() == 1);
  RunPtr last = o.run(4, 79, 1);  // 64: a unit
  CHECK(o.submit(rig.c, last));   // held, and issued with the others at once
  CHECK(rig.c.held_runs() == 0);
  auto log = o.log();
  REQUIRE(log.size() == 2);
  CHECK(log[1].id == -1);
  CHECK(log[1].n == 64);
  CHECK(last->issued);
  CHECK(rig.c.runs_coalesced() == 4);

  // A run of a unit goes alone even when it continues the one before.
  CHECK_FALSE(o.submit(rig.c, o.run(5, 80, 64)));
  CHECK(o.log().size() == 3);
}

TEST_CASE("a run of another shape issues the held ones first and is held apart from them", "[coalesce]") {
  Rig rig;
  Owner& o = rig.owner;
  o.gate(rig.c);
  o.hold(rig.c, 2);
  // Continues them, but is issued another way (other input types).
  RunPtr other = o.run(3, 32, 8);
  CHECK(o.submit(rig.c, other, 'b'));
  auto log = o.log();
  REQUIRE(log.size() == 2);
  CHECK(log[1].id == -1);
  CHECK(log[1].shape == 'a');
  CHECK(log[1].n == 16);
  CHECK(rig.c.held_runs() == 1);
  rig.c.flush();
  log = o.log();
  REQUIRE(log.size() == 3);
  CHECK(log[2].id == 3);
  CHECK(log[2].shape == 'b');
  CHECK(rig.c.runs_coalesced() == 2);
}

TEST_CASE("held runs go when something waits for them, when the work ahead is done, for a run of nothing, and on "
          "closing",
          "[coalesce]") {
  Rig rig;
  Owner& o = rig.owner;
  RunPtr gate = o.gate(rig.c);
  const std::vector<RunPtr> held = o.hold(rig.c, 2);
  const RunPtr& a = held[0];
  const RunPtr& b = held[1];
  auto carried = [&] {
    const auto log = o.log();
    return log.size() == 2 && log[1].id == -1 && log[1].n == 16 && a->issued && b->issued;
  };

  SECTION("a ticket's wait") {
    b->issue_if_held();
    CHECK(carried());
  }
  SECTION("flush()") {
    rig.c.flush();
    CHECK(carried());
  }
  SECTION("the watcher, once the run ahead is done, with nothing waiting") {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK_FALSE(a->issued);  // the run ahead is still at work
    o.finish(gate);
    CHECK(Owner::eventually([&] { return a->issued.load() && b->issued.load(); }));
    CHECK(carried());
  }
  SECTION("a run of no elements: nothing queued, and the next run is held against the one before it") {
    RunPtr none = o.run(3, 32, 0);
    CHECK_FALSE(o.submit(rig.c, none));
    CHECK(carried());
    CHECK_FALSE(none->issued);  // neither held nor issued here: the owner marks it
    RunPtr c = o.run(4, 32, 8);
    CHECK(o.submit(rig.c, c));  // continues b, and the carrier is still running
    CHECK(rig.c.held_runs() == 1);
  }
  SECTION("closing (the pipeline's destructor), before the run ahead is done") {
    std::thread closer([&] { rig.c.close(); });  // then waits for its watcher, which waits for the gate
    CHECK(Owner::eventually(carried));
    o.finish(gate);
    closer.join();
  }
  CHECK(rig.c.runs_coalesced() == 2);
}

TEST_CASE("a coalescer destroyed with held runs issues them", "[coalesce]") {
  Owner o;
  auto c = std::make_unique<Coalescer>(CoalesceRules{true, 64}, o.worker, o.hooks());
  o.gate(*c);
  const std::vector<RunPtr> held = o.hold(*c, 2);
  const RunPtr& a = held[0];
  const RunPtr& b = held[1];
  CHECK_FALSE(a->issued);
  // Destroyed while the run ahead is still at work: its watcher would
  // issue them only once that run is done.
  std::thread destroy([&] { c.reset(); });
  CHECK(Owner::eventually([&] { return a->issued.load() && b->issued.load(); }));
  o.finish_all();
  destroy.join();
  CHECK(a->issue.carrier == b->issue.carrier);
  CHECK(a->issue.carrier != nullptr);
  CHECK(a->setup.holder.expired());
}

TEST_CASE("an issue that fails fails every run it carried, with its error", "[coalesce]") {
  Rig rig;
  Owner& o = rig.owner;
  o.gate(rig.c);
  const std::vector<RunPtr> held = o.hold(rig.c, 3);
  o.fail_issues = true;
  held.back()->issue_if_held();
  REQUIRE(o.log().size() == 2);
  CHECK(o.log()[1].run->failed());
  for (const auto& r : held) {
    CHECK(r->issued);
    CHECK(r->failed());
    CHECK(r->error() == "the device went away");
  }
}

TEST_CASE("when no carrier can be made, held runs are issued one by one, in order", "[coalesce]") {
  Rig rig;
  Owner& o = rig.owner;
  o.gate(rig.c);
  const std::vector<RunPtr> held = o.hold(rig.c, 3);
  o.no_carriers = true;
  rig.c.flush();
  const auto log = o.log();
  REQUIRE(log.size() == 4);
  for (int k = 0; k < 3; ++k) {
    CHECK(log[1 + k].id == 1 + k);
    CHECK(log[1 + k].shape == 'a');
    CHECK(log[1 + k].n == 8);
    CHECK(log[1 + k].index == 1);  // numbered as the first held run, as a carrier would be
    CHECK(held[k]->issue.carrier == nullptr);
  }
  CHECK(rig.c.held_runs() == 0);
  CHECK(rig.c.runs_coalesced() == 0);
}

TEST_CASE("held runs queue behind what the owner's issue thread already has, and before the next run",
          "[coalesce]") {
  Rig rig;
  Owner& o = rig.owner;
  o.gate(rig.c);
  o.hold(rig.c, 2);
  o.block_worker();  // a staged run's host work, say
  CHECK_FALSE(o.submit(rig.c, o.run(3, 0, 8, true)));
  CHECK(o.log().size() == 1);  // all behind the blocked job
  o.open();
  o.worker.wait_idle();
  const auto log = o.log();
  REQUIRE(log.size() == 4);
  CHECK(log[0].id == 0);
  CHECK(log[1].id == -2);  // the job queued first
  CHECK(log[2].id == -1);  // the carrier
  CHECK(log[3].id == 3);   // the run that made them go
}

TEST_CASE("two threads submitting while a third waits: every run issued exactly once, in each thread's order",
          "[coalesce][threads]") {
  constexpr int runs = 1000;  // of 1 to 12 elements: within Owner::size
  Rig rig(256);
  Owner& o = rig.owner;
  o.submit(rig.c, o.run(-3, 0, 16), 'a', false);  // the gate
  std::vector<RunPtr> all[2];
  std::mutex all_mutex;
  std::atomic<bool> submitting{true};
  std::atomic<int> ready{0};
  auto submitter = [&](int t) {
    std::mt19937 rng(static_cast<unsigned>(t) + 5);
    std::size_t at = 0;
    ++ready;
    while (ready.load() < 2) std::this_thread::yield();  // both at once
    for (int k = 0; k < runs; ++k) {
      if (rng() % 16 == 0) std::this_thread::yield();
      const std::size_t n = 1 + rng() % 12;
      RunPtr r = o.run(t * runs + k, at, n, t == 1);
      at += n;
      o.submit(rig.c, r);
      // Its ticket exists from here on (RunState::holder is set before).
      std::lock_guard<std::mutex> lock(all_mutex);
      all[t].push_back(r);
    }
  };
  std::thread waiter([&] {
    std::mt19937 rng(9);
    while (submitting) {
      RunPtr r;
      {
        std::lock_guard<std::mutex> lock(all_mutex);
        const auto& v = all[rng() % 2];
        if (!v.empty()) r = v[rng() % v.size()];
      }
      if (r) r->issue_if_held();
      if (rng() % 8 == 0) rig.c.flush();
      if (rng() % 4 == 0) {
        // The device finishes the latest issue: the watcher may issue what is held.
        const auto log = o.log();
        if (!log.empty()) o.finish(log.back().run);
      }
      std::this_thread::yield();
    }
  });
  std::thread t0(submitter, 0), t1(submitter, 1);
  t0.join();
  t1.join();
  submitting = false;
  waiter.join();
  rig.c.flush();
  o.worker.wait_idle();

  // Every element of each thread's arrays issued once, in order along them.
  std::size_t members = 0;
  for (int t = 0; t < 2; ++t) {
    const float* base = t == 0 ? o.a_in.data() : o.b_in.data();
    std::size_t total = 0;
    for (const auto& r : all[t]) {
      CHECK(r->issued);
      total += r->setup.ends->in[0].size;
      members += r->issue.carrier ? 1 : 0;
    }
    std::vector<int> times(total, 0);
    std::size_t next = 0;
    bool in_order = true;
    for (const Issued& i : o.log()) {
      if (i.id == -3 || i.in == nullptr) continue;
      const float* p = reinterpret_cast<const float*>(i.in);
      if (p < base || p >= base + Owner::size) continue;
      const std::size_t from = static_cast<std::size_t>(p - base);
      in_order = in_order && from == next;
      next = from + i.n;
      for (std::size_t e = from; e < from + i.n && e < total; ++e) ++times[e];
    }
    CHECK(in_order);
    CHECK(next == total);
    CHECK(std::count(times.begin(), times.end(), 1) == static_cast<std::ptrdiff_t>(total));
  }
  CHECK(members > 0);  // runs did join: else this checked only runs going alone
  CHECK(rig.c.runs_coalesced() == members);
}
