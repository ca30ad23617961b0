// SPDX-License-Identifier: MIT
// Definitions for detail/run_timeline.hpp. Included at its bottom where chunkpipe is
// header-only, or once by <chunkpipe/compiled.hpp> (detail/linkage.hpp); do
// not include directly.
#pragma once

namespace chunkpipe::detail {

CHUNKPIPE_INLINE std::string run_label(const Geometry& g, int lanes) {
  return std::string(to_string(g.policy)) + ", depth " + std::to_string(g.depth) +
         (lanes > 1 ? ", " + std::to_string(lanes) + " kernel lanes" : std::string());
}

CHUNKPIPE_INLINE void RunTimeline::describe(const Geometry& g, const Options& o, const Endpoints& ends,
                                            const LinkModel& link, Executor executor, const std::string& note) {
  Report& r = report;
  r.label = run_label(g, g.kernel_lanes);
  r.policy = g.policy;
  r.depth = g.depth;
  r.chunk_elems = g.chunk_elems;
  r.link = link;
  r.executor = executor;
  r.executor_note = note;
  const int threads = ::chunkpipe::detail::host_threads_for(o);
  r.io = ::chunkpipe::detail::describe_io(
      ends,
      std::to_string(threads) + (threads == 1 ? " thread" : " threads") +
          (o.host_threads > 0 ? " (Options::host_threads)" : " (the default: min(8, hardware threads))"),
      "into " + std::to_string(g.depth) + " free slots" +
          (o.policy == Policy::automatic ? " (the automatic policy's depth)" : " (Options::depth)"));
}

CHUNKPIPE_INLINE void RunTimeline::build(std::size_t chunks, std::size_t elems, const Endpoints* ends) {
  report.ops.clear();
  // Done by now (wait() found every stream past it), but an origin no
  // timed device op follows is waited for rather than assumed.
  if (origin) CHUNKPIPE_CUDA_TRY(cudaEventSynchronize(origin.get()));
  for (const Timed& t : timed) {
    TimedOp op = t.op;
    if (t.start) {
      float a = 0.f, b = 0.f;
      CHUNKPIPE_CUDA_TRY(cudaEventElapsedTime(&a, origin.get(), t.start.get()));
      CHUNKPIPE_CUDA_TRY(cudaEventElapsedTime(&b, origin.get(), t.end.get()));
      op.start_ms = a;
      op.end_ms = b;
    } else {
      // A host-in issued ahead of a Source that had already ended did
      // nothing: it has no times.
      if (t.host_end == std::chrono::steady_clock::time_point{}) continue;
      // Host ops are placed by the host clock, aligned at the origin event's
      // recording; the offset is the launch latency, microseconds.
      op.start_ms = std::chrono::duration<double, std::milli>(t.host_start - host_origin).count();
      op.end_ms = std::chrono::duration<double, std::milli>(t.host_end - host_origin).count();
    }
    report.ops.push_back(op);
  }
  if (clock_zero) {
    float since = 0.f;
    CHUNKPIPE_CUDA_TRY(cudaEventElapsedTime(&since, clock_zero->get(), origin.get()));
    report.clock_ms = since;
    report.clock_zero_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(host_clock_zero.time_since_epoch()).count();
  }
  report.chunks = chunks;
  report.elems = elems;
  const IoBytes bytes = ends ? io_bytes(*ends, elems) : IoBytes{};
  report.bytes_in = bytes.in;
  report.bytes_out = bytes.out;
}

}  // namespace chunkpipe::detail
