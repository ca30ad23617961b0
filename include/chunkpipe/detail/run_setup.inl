// SPDX-License-Identifier: MIT
// Definitions for detail/run_setup.hpp. Included at its bottom where
// chunkpipe is header-only, or once by <chunkpipe/compiled.hpp>
// (detail/linkage.hpp); do not include directly.
#pragma once

namespace chunkpipe::detail {

CHUNKPIPE_INLINE void check_packed(const Packed& p) {
  if (p.overflowed()) {
    throw pipeline_error("chunkpipe: the last stage emitted " + std::to_string(p.emitted) +
                         " elements, and an output range holds " + std::to_string(p.capacity) + ": the first " +
                         std::to_string(p.written) + " were written and nothing past the end; give outputs of at least " +
                         std::to_string(p.emitted) + " elements");
  }
}

CHUNKPIPE_INLINE void complete_endpoints(Endpoints& e, std::size_t per_record, std::shared_ptr<Packed> packed,
                                         std::shared_ptr<void> keep) {
  e.per_record = per_record;
  e.keep = std::move(keep);
  if (!packed) return;
  for (const auto& out : e.out) {
    if (!out.consume) packed->capacity = std::min(packed->capacity, out.size);
  }
  e.packed = packed;
  // A Sink's finish comes after the check, so it never sees a run that failed.
  std::function<void()> then = std::move(e.finish);
  e.finish = [packed, then] {
    check_packed(*packed);
    if (then) then();
  };
}

CHUNKPIPE_INLINE RunSpec spec_for(const Endpoints& e, std::size_t n, std::size_t chunk_elems) {
  RunSpec s;
  s.chunks = n == unknown_length ? unknown_chunks : (n + chunk_elems - 1) / chunk_elems;
  for (const auto& in : e.in) s.stage_in = s.stage_in || in.staged;
  for (const auto& out : e.out) s.stage_out = s.stage_out || out.staged;
  s.stage_out = s.stage_out || e.packed != nullptr;  // only a host-out op knows how much to copy
  s.elems = n == unknown_length ? 0 : n;
  return s;
}

CHUNKPIPE_INLINE bool continues(const Endpoints& prev, std::size_t prev_n, const Endpoints& next,
                                std::size_t next_n) noexcept {
  auto plain = [](const Endpoints& e, std::size_t n) {
    if (n == 0 || e.in.empty() || e.per_record != 1 || e.keep || e.packed || e.finish || e.abort) return false;
    for (const auto& in : e.in) {
      if (in.staged || in.produce || in.data == nullptr || in.size != n) return false;
    }
    for (const auto& out : e.out) {
      if (out.staged || out.consume || out.data == nullptr || out.size != n) return false;
    }
    return true;
  };
  if (!plain(prev, prev_n) || !plain(next, next_n) || prev.in.size() != next.in.size() || prev.out.size() != next.out.size()) {
    return false;
  }
  for (std::size_t i = 0; i < prev.in.size(); ++i) {
    const auto &a = prev.in[i], &b = next.in[i];
    if (a.elem_size != b.elem_size || a.data + a.size * a.elem_size != b.data) return false;
  }
  for (std::size_t o = 0; o < prev.out.size(); ++o) {
    const auto &a = prev.out[o], &b = next.out[o];
    if (a.elem_size != b.elem_size || a.data + a.size * a.elem_size != b.data) return false;
  }
  return true;
}

CHUNKPIPE_INLINE RunRanges::RunRanges(const Endpoints& e) {
  for (std::size_t i = 0; i < e.in.size(); ++i) {
    const auto& in = e.in[i];
    if (in.data != nullptr && in.size != 0) {
      ranges_.push_back({in.data, in.data + in.size * in.elem_size, in.elem_size, false, static_cast<int>(i)});
    }
  }
  // A folding run's outputs are storage it owns (Endpoints::keep), which
  // no other run's ranges can overlap until the pool hands it on, after
  // this run let go: not ranges to check.
  for (std::size_t o = 0; o < e.out.size() && !e.keep; ++o) {
    const auto& out = e.out[o];
    if (out.data != nullptr && out.size != 0) {
      ranges_.push_back({out.data, out.data + out.size * out.elem_size, out.elem_size, true, static_cast<int>(o)});
    }
  }
}

CHUNKPIPE_INLINE bool RunRanges::writes() const noexcept {
  for (const RangeRef& r : ranges_) {
    if (r.output) return true;
  }
  return false;
}

CHUNKPIPE_INLINE std::string describe_range(const RangeRef& r) {
  char at[40];
  std::snprintf(at, sizeof at, "%p", static_cast<const void*>(r.lo));
  return std::string(r.output ? "output " : "input ") + std::to_string(r.index) + " (" +
         std::to_string(static_cast<std::size_t>(r.hi - r.lo)) + " bytes at " + at + ")";
}

CHUNKPIPE_INLINE void check_run_ranges(const RunRanges& run) {
  const auto& r = run.ranges();
  for (std::size_t a = 0; a < r.size(); ++a) {
    for (std::size_t b = a + 1; b < r.size(); ++b) {
      if (!r[a].output && !r[b].output) continue;  // reading twice is fine
      if (!r[a].overlaps(r[b])) continue;
      const bool in_place = r[a].output != r[b].output && r[a].same_as(r[b]);
      if (in_place) continue;
      throw config_error("chunkpipe: " + describe_range(r[a]) + " and " + describe_range(r[b]) +
                         " overlap; a run may only write in place over exactly the range it reads "
                         "(same start, same element size), and outputs may not overlap");
    }
  }
}

}  // namespace chunkpipe::detail
