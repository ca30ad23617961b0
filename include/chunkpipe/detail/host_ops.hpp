// SPDX-License-Identifier: MIT
// What a host op does, whoever runs it: a Source fills its slot, a Sink
// consumes one, staged ranges are copied, a counted stage's output is
// packed; a Source that reads at any offset in parts at once, a Sink that
// writes at any offset a chunk a call. The CUDA stream executor and the
// host backend run host ops through run_host_op, each with its own way to
// copy and to share work. Host-only.
#pragma once

#include <chunkpipe/errors.hpp>
#include <chunkpipe/plan.hpp>
#include <chunkpipe/detail/endpoints.hpp>
#include <chunkpipe/detail/slots.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

namespace chunkpipe::detail {

/// Splits elements [0, count) of one positional read or write over the
/// parts `par(fn)` calls fn(part, parts) for (a team of threads, or one),
/// calling part(lo, hi) for each non-empty piece. Pieces are whole 64 KiB
/// (a page-aligned read where the chunk starts on one), and a chunk under
/// 1 MiB is one piece: waking a team costs more than it saves there.
template <class Par, class Piece>
void split_over(Par&& par, std::size_t count, std::size_t elem_size, Piece&& part) {
  if (count * elem_size < (std::size_t{1} << 20)) {
    part(std::size_t{0}, count);
    return;
  }
  const std::size_t align = std::max<std::size_t>(1, (std::size_t{1} << 16) / elem_size);
  par([&](std::size_t k, std::size_t parts) {
    const std::size_t per = ((count + parts - 1) / parts + align - 1) / align * align;
    const std::size_t lo = std::min(count, k * per), hi = std::min(count, lo + per);
    if (lo < hi) part(lo, hi);
  });
}

/// Reads one chunk of a positional Source (Endpoints::In::read_at) into
/// `dst`, `count` elements from element `offset`, in parts over `par`, and
/// returns how many it holds: up to where the first part came up short.
/// Throws what read_at throws, and pipeline_error for a Source that gave
/// elements past a point where it said the input ended.
template <class Par>
std::size_t read_positional(const Endpoints::In& in, std::size_t offset, void* dst, std::size_t count, Par&& par) {
  std::atomic<std::size_t> end{count};   // the least end of a part that came up short
  std::atomic<std::size_t> reach{0};     // the furthest element any part read
  ::chunkpipe::detail::split_over(par, count, in.elem_size, [&](std::size_t lo, std::size_t hi) {
    const std::size_t n = in.read_at(offset + lo, static_cast<std::byte*>(dst) + lo * in.elem_size, hi - lo);
    if (n < hi - lo) {
      std::size_t e = end.load();
      while (lo + n < e && !end.compare_exchange_weak(e, lo + n)) {
      }
    }
    if (n != 0) {
      std::size_t r = reach.load();
      while (lo + n > r && !reach.compare_exchange_weak(r, lo + n)) {
      }
    }
  });
  if (reach.load() > end.load()) {
    throw pipeline_error("chunkpipe: a source's read_at said the input ends at element " +
                         std::to_string(offset + end.load()) + " and then gave elements up to " +
                         std::to_string(offset + reach.load()) + " (did it change while being read?)");
  }
  return end.load();
}

/// Writes `count` records from `data` at record `offset` of a positional
/// Sink (Endpoints::Out::write_at), in one call. Unlike reads, a chunk is
/// not split over the team: several threads writing one file at once are
/// slower than one (ext4 on the H200 machine: storage_bench's pwrite rows,
/// benchmarks/RESULTS.md), and a Sink's own writer (file_sink) starts the
/// chunk's write-back as soon as it returns. Throws what write_at throws.
inline void write_positional(const Endpoints::Out& out, std::size_t offset, const void* data, std::size_t count) {
  out.write_at(offset, data, count);
}

/// A host-out op of a run whose last stage emitted a count: reads the
/// count the copy out brought to the pinned slot, then moves exactly that
/// many elements, packed after what earlier chunks emitted: from the device
/// buffer straight into a pinned output range with `from_device(dst, src,
/// bytes)` (which blocks until it is done), or through the pinned slot into
/// a pageable range (`copy`) or a Sink. An output too short for what was
/// emitted is filled to its end and no further; `packed` keeps counting,
/// so the run can say how much was needed. A spread's piece with a
/// PackedPlace whose base is known by its first chunk that emits anything
/// moves its elements into the spread run's outputs instead, at that base
/// (what fits of them), and counts as if it had written its own. Throws
/// pipeline_error for a count above the chunk's elements, and what a Sink
/// throws.
template <class CopyFn, class DeviceCopyFn>
void run_packed_out(const Op& op, const Step& step, const SlotMemory& mem, const Endpoints& ends,
                    std::size_t run_chunk, std::size_t count, std::vector<Copy>& scratch, CopyFn&& copy,
                    DeviceCopyFn&& from_device) {
  Packed& p = *ends.packed;
  const std::size_t outs = ends.out.size();
  std::size_t got = 0;
  std::memcpy(&got, mem.array(step.reads[0], outs, op.slot), sizeof got);
  if (got > count) {
    throw pipeline_error("chunkpipe: the last stage emitted " + std::to_string(got) + " elements from chunk " +
                         std::to_string(run_chunk) + " of " + std::to_string(count) +
                         "; a stage may emit at most as many elements as it got");
  }
  const std::size_t at = p.emitted;
  p.emitted += got;
  PackedPlace* place = p.place.get();
  if (place && got != 0 && !p.asked) {
    p.base = place->base();
    p.asked = true;
  }
  const bool in_place = place && p.base != PackedPlace::unknown;
  // Ranges get what fits, up to their end: the chunk that crosses it
  // leaves a prefix, and the run fails once it has counted everything.
  const std::size_t room = got != 0 && p.written == at && at < p.capacity ? std::min(got, p.capacity - at) : 0;
  // In place: the pieces before wrote every element they had room for,
  // so the spread run's outputs are written up to base + at, or full.
  const std::size_t to = in_place ? p.base + at : 0;
  const std::size_t room_there = in_place && got != 0 && to < place->capacity ? std::min(got, place->capacity - to) : 0;
  for (std::size_t o = 0; o < outs && got != 0; ++o) {
    const auto& e = ends.out[o];
    const void* device = mem.array(step.reads[1], o, op.slot);
    if (e.consume) {
      void* bounce = mem.array(step.reads[0], o, op.slot);
      from_device(bounce, device, got * e.elem_size);
      if (e.write_at) {
        ::chunkpipe::detail::write_positional(e, at, bounce, got);
      } else {
        e.consume(run_chunk, at, bounce, got);
      }
    } else if (in_place) {
      if (room_there != 0) from_device(place->data[o] + to * e.elem_size, device, room_there * e.elem_size);
    } else if (room == 0) {
      continue;
    } else if (!e.staged) {
      from_device(e.data + at * e.elem_size, device, room * e.elem_size);
    } else {
      void* bounce = mem.array(step.reads[0], o, op.slot);
      from_device(bounce, device, room * e.elem_size);
      scratch.clear();
      scratch.push_back({e.data + at * e.elem_size, bounce, room * e.elem_size});
      copy(scratch);
    }
  }
  if (room != 0) p.written = at + room;
  if (place && ++p.chunks == place->chunks) place->done(p.emitted);
}

/// Runs a host op of the run's chunk `run_chunk` (elements [offset, offset +
/// count) of the run): a Source fills its slot, a Sink consumes its slot,
/// staged ranges are copied with `copy(copies)`. For host_in, `count` is the
/// slot's capacity when a Source decides the length; returns the elements
/// the chunk holds (what the Source produced, else `count`). A run whose
/// last stage emits a count copies out with run_packed_out(), and
/// `from_device` (see there). A positional Source (read_at) reads the
/// chunk in parts, over `par(fn)`, which calls fn(part, parts) for every
/// part, on a team of threads or in turn; a positional Sink (write_at) gets
/// the chunk in one call.
/// Throws what a source or sink throws, and pipeline_error when a source
/// produces more than an output range holds.
template <class CopyFn, class DeviceCopyFn, class Par>
std::size_t run_host_op(const Op& op, const Step& step, const SlotMemory& mem, const Endpoints& ends,
                        std::size_t run_chunk, std::size_t offset, std::size_t count, std::vector<Copy>& scratch,
                        CopyFn&& copy, DeviceCopyFn&& from_device, Par&& par) {
  if (count == 0) return 0;
  if (ends.packed && op.kind == OpKind::host_out) {
    ::chunkpipe::detail::run_packed_out(op, step, mem, ends, run_chunk, count, scratch, copy, from_device);
    return count;
  }
  std::size_t produced = count;
  if (op.kind == OpKind::host_in) {
    for (std::size_t i = 0; i < ends.in.size(); ++i) {
      if (!ends.in[i].produce) continue;
      void* slot = mem.array(step.writes[0], i, op.slot);
      produced = ends.in[i].read_at ? ::chunkpipe::detail::read_positional(ends.in[i], offset, slot, count, par)
                                    : ends.in[i].produce(run_chunk, slot, count);
      const RecordRange r = ::chunkpipe::detail::records_of_chunk(ends, offset, produced);
      for (std::size_t o = 0; o < ends.out.size() && !ends.packed; ++o) {
        const auto& e = ends.out[o];
        if (!e.consume && r.offset + r.count > e.size) {
          throw pipeline_error("chunkpipe: the source produced more than the " + std::to_string(e.size) +
                               (ends.per_record == 1 ? " elements" : " records") + " output " + std::to_string(o) +
                               " holds");
        }
      }
    }
  } else {
    const RecordRange r = ::chunkpipe::detail::records_of_chunk(ends, offset, count);
    for (std::size_t o = 0; o < ends.out.size(); ++o) {
      const auto& e = ends.out[o];
      if (e.write_at) {
        ::chunkpipe::detail::write_positional(e, r.offset, mem.array(step.reads[0], o, op.slot), r.count);
      } else if (e.consume) {
        e.consume(run_chunk, r.offset, mem.array(step.reads[0], o, op.slot), r.count);
      }
    }
  }
  ::chunkpipe::detail::copies_of(op, step, mem, ends, offset, produced, scratch);
  if (!scratch.empty()) copy(scratch);
  return produced;
}

}  // namespace chunkpipe::detail
