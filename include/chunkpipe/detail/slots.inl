// SPDX-License-Identifier: MIT
// Definitions for detail/slots.hpp. Included at its bottom where chunkpipe is
// header-only, or once by <chunkpipe/compiled.hpp> (detail/linkage.hpp); do
// not include directly.
#pragma once

namespace chunkpipe::detail {

CHUNKPIPE_INLINE SlotLayout make_slot_layout(const std::vector<Step>& steps, std::size_t buffers, const Flow& flow,
                                             std::size_t chunk_elems, int depth, OutShape out, std::size_t segment) {
  const std::size_t out_records = out.records;
  SlotLayout l;
  l.arrays.resize(buffers);
  l.pinned.assign(buffers, false);
  l.chunk_elems = chunk_elems;
  l.depth = depth;
  const std::size_t last_stage = flow.stage_out.size() - 1;
  const std::size_t records = out_records == 0 ? chunk_elems : out_records;
  auto sized = [](const std::vector<std::size_t>& sizes, std::size_t elems) {
    std::vector<SlotLayout::Array> a(sizes.size());
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      a[i].elem_size = sizes[i];
      a[i].elems = elems;
    }
    return a;
  };
  for (const Step& s : steps) {
    switch (s.kind) {
      case OpKind::host_in:
        l.arrays[static_cast<std::size_t>(s.writes[0])] = sized(flow.in_sizes, chunk_elems);
        l.pinned[static_cast<std::size_t>(s.writes[0])] = true;
        break;
      case OpKind::h2d: l.arrays[static_cast<std::size_t>(s.writes[0])] = sized(flow.in_sizes, chunk_elems); break;
      case OpKind::stage: {
        const auto stage = static_cast<std::size_t>(s.stage);
        if (s.writes.size() > 1 && stage < flow.carry_sizes.size() && flow.carry_sizes[stage] != 0) {
          const std::size_t per = segment == 0 ? 1 : segment;
          l.arrays[static_cast<std::size_t>(s.writes[1])] = {{0, flow.carry_sizes[stage], 1 + (chunk_elems + per - 1) / per}};
        }
        // An in-place stage writes the buffer it reads: keep its size.
        if (!s.reads.empty() && s.reads[0] == s.writes[0]) break;
        auto& arrays = l.arrays[static_cast<std::size_t>(s.writes[0])];
        arrays = sized(flow.stage_out[stage], stage == last_stage ? records : chunk_elems);
        if (stage == last_stage && out.counted) {
          arrays.push_back({0, sizeof(std::size_t), 1});
          if (out.scratch_bytes != 0) arrays.push_back({0, 1, out.scratch_bytes});
        }
        break;
      }
      case OpKind::d2h:
        if (!s.writes.empty()) {
          auto& arrays = l.arrays[static_cast<std::size_t>(s.writes[0])];
          arrays = sized(flow.out_sizes, records);
          if (out.counted) arrays.push_back({0, sizeof(std::size_t), 1});
          l.pinned[static_cast<std::size_t>(s.writes[0])] = true;
        }
        break;
      case OpKind::host_out: break;
    }
  }
  for (std::size_t b = 0; b < buffers; ++b) {
    std::size_t& bytes = l.pinned[b] ? l.pinned_slot_bytes : l.device_slot_bytes;
    for (SlotLayout::Array& a : l.arrays[b]) {
      if (a.elem_size == 0) continue;
      a.offset = bytes;
      bytes += align_up(a.elem_size * a.elems, slot_alignment);
    }
  }
  return l;
}

CHUNKPIPE_INLINE void copies_of(const Op& op, const Step& step, const SlotMemory& mem, const Endpoints& ends,
                                std::size_t offset, std::size_t count, std::vector<Copy>& out) {
  out.clear();
  if (count == 0) return;
  if (ends.packed) {
    // The count crosses first; a host-out op copies what it says
    // (run_host_op), so plain copies out carry nothing else.
    if (op.kind == OpKind::d2h) {
      const std::size_t c = ends.out.size();
      out.push_back({mem.array(step.writes[0], c, op.slot), mem.array(step.reads[0], c, op.slot), sizeof(std::size_t)});
      return;
    }
    if (op.kind == OpKind::host_out) return;
  }
  if (op.kind == OpKind::d2h || op.kind == OpKind::host_out) {
    const RecordRange r = ::chunkpipe::detail::records_of_chunk(ends, offset, count);
    offset = r.offset;
    count = r.count;
  }
  switch (op.kind) {
    case OpKind::host_in:
      for (std::size_t i = 0; i < ends.in.size(); ++i) {
        const auto& e = ends.in[i];
        if (e.staged && !e.produce) {
          out.push_back({mem.array(step.writes[0], i, op.slot), e.data + offset * e.elem_size, count * e.elem_size});
        }
      }
      break;
    case OpKind::h2d:
      for (std::size_t i = 0; i < ends.in.size(); ++i) {
        const auto& e = ends.in[i];
        const void* src = e.staged ? static_cast<const void*>(mem.array(step.reads[0], i, op.slot))
                                   : static_cast<const void*>(e.data + offset * e.elem_size);
        out.push_back({mem.array(step.writes[0], i, op.slot), src, count * e.elem_size});
      }
      break;
    case OpKind::d2h:
      for (std::size_t o = 0; o < ends.out.size(); ++o) {
        const auto& e = ends.out[o];
        void* dst = e.staged ? static_cast<void*>(mem.array(step.writes[0], o, op.slot))
                             : static_cast<void*>(e.data + offset * e.elem_size);
        out.push_back({dst, mem.array(step.reads[0], o, op.slot), count * e.elem_size});
      }
      break;
    case OpKind::host_out:
      for (std::size_t o = 0; o < ends.out.size(); ++o) {
        const auto& e = ends.out[o];
        if (e.staged && !e.consume) {
          out.push_back({e.data + offset * e.elem_size, mem.array(step.reads[0], o, op.slot), count * e.elem_size});
        }
      }
      break;
    case OpKind::stage: break;
  }
}

}  // namespace chunkpipe::detail
