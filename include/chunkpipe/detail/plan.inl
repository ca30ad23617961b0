// SPDX-License-Identifier: MIT
// Definitions for plan.hpp. Included at its bottom where chunkpipe is
// header-only, or once by <chunkpipe/compiled.hpp> (detail/linkage.hpp); do
// not include directly.
#pragma once

#include <algorithm>
#include <iomanip>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace chunkpipe {

CHUNKPIPE_INLINE std::string_view to_string(Policy policy) noexcept {
  switch (policy) {
    case Policy::serial: return "serial";
    case Policy::slot_streams: return "slot_streams";
    case Policy::stage_streams: return "stage_streams";
    case Policy::automatic: return "auto";
  }
  return "?";
}

CHUNKPIPE_INLINE std::string_view to_string(OpKind kind) noexcept {
  switch (kind) {
    case OpKind::host_in: return "host-in";
    case OpKind::h2d: return "h2d";
    case OpKind::stage: return "stage";
    case OpKind::d2h: return "d2h";
    case OpKind::host_out: return "host-out";
  }
  return "?";
}

CHUNKPIPE_INLINE std::string_view to_string(Executor executor) noexcept {
  switch (executor) {
    case Executor::automatic: return "auto";
    case Executor::streams: return "streams";
    case Executor::graphs: return "graphs";
  }
  return "?";
}

CHUNKPIPE_INLINE Executor parse_executor(std::string_view text) {
  if (text == "streams") return Executor::streams;
  if (text == "graphs") return Executor::graphs;
  if (text == "auto" || text == "automatic") return Executor::automatic;
  throw config_error("chunkpipe: unknown executor '" + std::string(text) + "' (expected streams, graphs or auto)");
}

CHUNKPIPE_INLINE Policy parse_policy(std::string_view text) {
  if (text == "serial") return Policy::serial;
  if (text == "slot_streams") return Policy::slot_streams;
  if (text == "stage_streams") return Policy::stage_streams;
  if (text == "auto" || text == "automatic") return Policy::automatic;
  throw config_error("chunkpipe: unknown policy '" + std::string(text) +
                     "' (expected serial, slot_streams, stage_streams or auto)");
}

CHUNKPIPE_INLINE Resolved resolve(Policy policy, int depth) {
  if (depth < 0) {
    throw config_error("chunkpipe: depth must be at least 1 (0 picks the default), got " +
                       std::to_string(depth));
  }
  if (policy == Policy::serial) return {Policy::serial, 1};
  if (policy == Policy::automatic) policy = Policy::stage_streams;
  return {policy, depth == 0 ? default_depth : depth};
}

CHUNKPIPE_INLINE std::string Plan::describe(const Op& op) const {
  std::ostringstream s;
  s << to_string(op.kind);
  if (op.kind == OpKind::stage) s << ' ' << op.stage;
  s << " of chunk " << op.chunk << " (op #" << op.id << ", slot " << op.slot
    << ", queue " << queues.at(static_cast<std::size_t>(op.queue)).name << ')';
  return s.str();
}

CHUNKPIPE_INLINE PlanBuilder::PlanBuilder(Policy policy, int depth, PlanShape shape)
    : layout_(detail::make_plan_layout(policy, depth, std::move(shape))), order_(layout_) {
  run_.lanes = layout_.lanes;
  run_.tail.assign(layout_.queues.size(), detail::OpAccess{});
}

CHUNKPIPE_INLINE void PlanBuilder::begin_run(const RunSpec& spec) {
  if (run_.open) throw std::logic_error("chunkpipe: PlanBuilder::begin_run: a run is already open");
  const PlanShape& shape = layout_.shape;
  const int lanes = layout_.lanes;
  const int v = (spec.stage_in ? 1 : 0) | (spec.stage_out ? 2 : 0);
  if (!layout_.table.variant_ok[v] && shape.variable_out && !spec.stage_out) {
    throw config_error("chunkpipe: the last stage emits a count the device decides, so every run must stage "
                       "outputs (RunSpec::stage_out)");
  }
  if (!layout_.table.variant_ok[v]) {
    throw config_error(std::string("chunkpipe: this schedule was built for runs that ") +
                       (shape.stage_in ? "stage" : "do not stage") + " inputs and " +
                       (shape.stage_out ? "stage" : "do not stage") +
                       " outputs; set PlanShape::per_run_staging to mix them");
  }
  // After a run that ended early, host-in ops were issued for chunks it
  // never reached; the next run starts past them, at the start of a batch,
  // so batched waits find each batch whole.
  const std::size_t batch = layout_.wait_batch;
  std::size_t base = run_.next_chunk;
  if (run_.skipped && batch > 1) base = (base + batch - 1) / batch * batch;
  if (spec.kernel_lanes < 0 || spec.kernel_lanes > lanes) {
    throw config_error("chunkpipe: RunSpec::kernel_lanes " + std::to_string(spec.kernel_lanes) +
                       " is more lanes than this schedule has (" + std::to_string(lanes) + "; 0 takes them all)");
  }
  if (!shape.lanes_vary && spec.kernel_lanes != 0 && spec.kernel_lanes != lanes) {
    throw config_error("chunkpipe: RunSpec::kernel_lanes " + std::to_string(spec.kernel_lanes) +
                       " differs from the schedule's " + std::to_string(lanes) +
                       ", and its shape does not let runs' lanes vary (PlanShape::lanes_vary)");
  }
  run_.lanes = spec.kernel_lanes == 0 ? lanes : spec.kernel_lanes;
  run_.open = true;
  run_.spec = spec;
  run_.base = base;
  run_.next_chunk = base;
  run_.chunks = spec.chunks;
  run_.truncated = false;
  run_.tick = 0;
  run_.tick_open = false;
  run_.first_op = order_.issued();
  run_.skipped = false;
  for (detail::OpAccess& a : run_.tail) a.valid = false;
}

CHUNKPIPE_INLINE void PlanBuilder::set_run_chunks(std::size_t chunks) {
  if (!run_.open) throw std::logic_error("chunkpipe: PlanBuilder::set_run_chunks: no run is open");
  if (chunks == run_.chunks) return;
  if (chunks > run_.chunks) {
    throw std::logic_error("chunkpipe: PlanBuilder::set_run_chunks: a run cannot grow (" + std::to_string(run_.chunks) +
                           " chunks, asked for " + std::to_string(chunks) + ")");
  }
  if (chunks < run_.tick + 1) {
    throw std::logic_error("chunkpipe: PlanBuilder::set_run_chunks: " + std::to_string(chunks) + " chunks, but tick " +
                           std::to_string(run_.tick) + " is already under way");
  }
  run_.chunks = chunks;
  run_.truncated = true;
}

CHUNKPIPE_INLINE void PlanBuilder::emit_chunk_steps(bool ahead, std::size_t tick, OpBatch& out) {
  // The first half of a tick is host-in, whose chunk a Source fills before
  // anything else of that chunk can be sized; the second half the rest.
  for (int s : layout_.table.active[run_.variant()]) {
    const Step& st = layout_.table.steps[static_cast<std::size_t>(s)];
    const int a = st.ahead;
    if ((st.kind == OpKind::host_in) != ahead) continue;
    const std::size_t chunk = tick + static_cast<std::size_t>(a);
    // An ahead step issues chunks 0..ahead-1 of its own at tick 0, so the
    // ring starts full.
    if (a > 0 && tick == 0) {
      for (std::size_t c = 0; c < chunk && c < run_.chunks; ++c) emit(s, c, out);
    }
    if (chunk < run_.chunks) emit(s, chunk, out);
  }
}

CHUNKPIPE_INLINE bool PlanBuilder::begin_tick(OpBatch& out) {
  if (!run_.open) throw std::logic_error("chunkpipe: PlanBuilder::begin_tick: no run is open");
  if (run_.tick_open) throw std::logic_error("chunkpipe: PlanBuilder::begin_tick: the last tick is not finished");
  if (run_.tick >= run_.chunks) return false;
  emit_chunk_steps(true, run_.tick, out);
  run_.tick_open = true;
  return true;
}

CHUNKPIPE_INLINE void PlanBuilder::finish_tick(OpBatch& out) {
  if (!run_.tick_open) throw std::logic_error("chunkpipe: PlanBuilder::finish_tick: no tick is open");
  emit_chunk_steps(false, run_.tick, out);
  ++run_.tick;
  run_.tick_open = false;
}

CHUNKPIPE_INLINE bool PlanBuilder::next_tick(OpBatch& out) {
  if (!begin_tick(out)) return false;
  finish_tick(out);
  return true;
}

CHUNKPIPE_INLINE bool PlanBuilder::next_tick(std::size_t chunk_limit, std::vector<Op>& out) {
  if (!run_.open) begin_run(RunSpec{unknown_chunks, layout_.shape.stage_in, layout_.shape.stage_out, 0});
  if (chunk_limit <= run_.tick) return false;
  if (chunk_limit < run_.chunks) set_run_chunks(chunk_limit);
  compat_.clear();
  const bool more = next_tick(compat_);
  out.insert(out.end(), compat_.begin(), compat_.end());
  return more;
}

CHUNKPIPE_INLINE PlanRun PlanBuilder::end_run() {
  if (!run_.open) throw std::logic_error("chunkpipe: PlanBuilder::end_run: no run is open");
  if (run_.tick_open || run_.tick < run_.chunks) {
    throw std::logic_error("chunkpipe: PlanBuilder::end_run: the run has ticks left");
  }
  PlanRun r;
  r.first_chunk = run_.base;
  r.chunks = run_.chunks;
  r.first_op = run_.first_op;
  r.ops = order_.issued() - run_.first_op;
  r.stage_in = run_.spec.stage_in;
  r.stage_out = run_.spec.stage_out;
  r.elems = run_.spec.elems;
  r.kernel_lanes = run_.lanes;
  // The run's last op on each queue, less those another such op waits for
  // (directly or not): what is left implies every op of the run.
  const std::vector<detail::OpAccess>& tail = run_.tail;
  for (std::size_t q = 0; q < tail.size(); ++q) {
    const detail::OpAccess& t = tail[q];
    if (!t.valid) continue;
    bool implied = false;
    for (std::size_t o = 0; o < tail.size() && !implied; ++o) {
      implied = o != q && tail[o].valid && tail[o].clock[q] >= t.pos;
    }
    if (!implied) r.tail.push_back(t.op);
  }
  std::sort(r.tail.begin(), r.tail.end());
  run_.skipped = run_.next_chunk > run_.base + run_.chunks;
  run_.open = false;
  return r;
}

// The op of step `step_index` for the run's chunk `run_chunk`: where it
// goes and whether it records an event follow from the layout and the run;
// its id and waits from the ops before it (PlanOrder::issue(), which also
// batches slot-reuse waits, PlanBuilder::wait_batch()).
CHUNKPIPE_INLINE void PlanBuilder::emit(int step_index, std::size_t run_chunk, OpBatch& out) {
  const Step& step = layout_.table.steps[static_cast<std::size_t>(step_index)];
  const std::size_t chunk = run_.base + run_chunk;
  Op& op = out.add();
  op.chunk = chunk;
  op.step = step_index;
  op.kind = step.kind;
  op.stage = step.stage;
  op.slot = static_cast<int>(chunk % static_cast<std::size_t>(layout_.depth));
  op.queue = layout_.queue_of(step, chunk, run_.lanes);
  run_.next_chunk = std::max(run_.next_chunk, chunk + 1);
  const bool cut_last = run_.truncated && chunk + 1 == run_.base + run_.chunks;
  op.signal = layout_.needs_event(step_index, chunk, run_.variant(), run_.lanes, cut_last);
  run_.tail[static_cast<std::size_t>(op.queue)] = order_.issue(layout_, op);
}

namespace detail {

CHUNKPIPE_INLINE Plan plan_header(const PlanBuilder& builder) {
  Plan plan;
  plan.policy = builder.policy();
  plan.depth = builder.depth();
  plan.shape = builder.shape();
  plan.queues = builder.queues();
  plan.steps = builder.steps();
  plan.buffers = builder.buffers();
  plan.ring_wide = builder.ring_wide();
  return plan;
}

/// A schedule's ops and runs, as issued through `builder`, as a Plan (what
/// check_hazards() and simulate() take). Chunks: the highest op's + 1.
CHUNKPIPE_INLINE Plan issued_plan(const PlanBuilder& builder, std::vector<Op> ops, std::vector<PlanRun> runs) {
  Plan plan = ::chunkpipe::detail::plan_header(builder);
  plan.ops = std::move(ops);
  plan.runs = std::move(runs);
  for (const Op& op : plan.ops) plan.chunks = std::max(plan.chunks, op.chunk + 1);
  return plan;
}

CHUNKPIPE_INLINE void plan_run(PlanBuilder& builder, const RunSpec& spec, Plan& plan) {
  builder.begin_run(spec);
  OpBatch batch;
  while (builder.next_tick(batch)) {
    plan.ops.insert(plan.ops.end(), batch.begin(), batch.end());
    batch.clear();
  }
  plan.runs.push_back(builder.end_run());
}

}  // namespace detail

CHUNKPIPE_INLINE Plan make_plan(Policy policy, int depth, const PlanShape& shape, std::size_t chunks) {
  PlanBuilder builder(policy, depth, shape);
  Plan plan = detail::plan_header(builder);
  detail::plan_run(builder, RunSpec{chunks, shape.stage_in, shape.stage_out || shape.variable_out, 0}, plan);
  plan.chunks = chunks;
  return plan;
}

CHUNKPIPE_INLINE Plan make_plan(Policy policy, int depth, const PlanShape& shape, const std::vector<RunSpec>& runs) {
  PlanBuilder builder(policy, depth, shape);
  Plan plan = detail::plan_header(builder);
  for (const RunSpec& spec : runs) {
    if (spec.chunks == unknown_chunks) {
      throw config_error("chunkpipe: make_plan: every run needs a known chunk count");
    }
    detail::plan_run(builder, spec, plan);
  }
  for (const Op& op : plan.ops) plan.chunks = std::max(plan.chunks, op.chunk + 1);
  return plan;
}

CHUNKPIPE_INLINE PlanGraph graph_of(const Plan& plan) {
  const std::size_t n = plan.ops.size();
  PlanGraph graph;
  graph.deps.resize(n);
  std::vector<std::size_t> last(plan.queues.size(), n);  // per queue: its latest op so far, n = none
  for (std::size_t i = 0; i < n; ++i) {
    const Op& op = plan.ops[i];
    auto malformed = [&](const std::string& why) {
      throw std::invalid_argument("chunkpipe: graph_of: op #" + std::to_string(i) + ": " + why);
    };
    if (op.id != i) malformed("id is " + std::to_string(op.id) + ", expected its position");
    if (op.queue < 0 || static_cast<std::size_t>(op.queue) >= last.size()) malformed("queue out of range");
    std::vector<std::size_t>& deps = graph.deps[i];
    deps.reserve(op.waits.size() + 1);
    for (std::size_t w : op.waits) {
      if (w >= i) malformed("waits for op #" + std::to_string(w) + ", which is not issued before it");
      deps.push_back(w);
    }
    // A graph has no stream to keep issue order, and planners leave out
    // every wait that order already implies: the queue edge stands in for
    // all of them.
    std::size_t& prev = last[static_cast<std::size_t>(op.queue)];
    if (prev != n) deps.push_back(prev);
    prev = i;
    std::sort(deps.begin(), deps.end());
    deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
  }
  return graph;
}

CHUNKPIPE_INLINE std::ostream& operator<<(std::ostream& os, const Plan& plan) {
  os << "plan: " << to_string(plan.policy) << ", depth " << plan.depth << ", " << plan.chunks
     << (plan.chunks == 1 ? " chunk" : " chunks") << ", queues:";
  for (const Queue& q : plan.queues) os << ' ' << (q.kind == QueueKind::host ? "[host] " : "") << q.name << ';';
  os << "\n   #  chunk  op        slot  queue       waits for\n";
  std::size_t next_run = plan.runs.size() > 1 ? 0 : plan.runs.size();
  for (const Op& op : plan.ops) {
    if (next_run < plan.runs.size() && plan.runs[next_run].first_op == op.id) {
      const PlanRun& r = plan.runs[next_run];
      os << "  -- run " << next_run << ": ";
      if (r.chunks == 0) {
        os << "no chunks";
      } else {
        os << "chunks " << r.first_chunk << " to " << r.first_chunk + r.chunks - 1;
      }
      os
         << (r.stage_in ? ", staged in" : "") << (r.stage_out ? ", staged out" : "") << '\n';
      ++next_run;
    }
    std::string kind(to_string(op.kind));
    if (op.kind == OpKind::stage) kind += ' ' + std::to_string(op.stage);
    os << std::setw(4) << op.id << "  " << std::setw(5) << op.chunk << "  " << std::left << std::setw(9)
       << kind << ' ' << std::right << std::setw(4) << op.slot << "  " << std::left << std::setw(11)
       << plan.queues[static_cast<std::size_t>(op.queue)].name << std::right << ' ';
    if (op.waits.empty()) os << '-';
    for (std::size_t i = 0; i < op.waits.size(); ++i) os << (i ? ", #" : "#") << op.waits[i];
    os << '\n';
  }
  return os;
}

}  // namespace chunkpipe
