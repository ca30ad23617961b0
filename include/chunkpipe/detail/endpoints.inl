// SPDX-License-Identifier: MIT
// Definitions for detail/endpoints.hpp. Included at its bottom where chunkpipe is
// header-only, or once by <chunkpipe/compiled.hpp> (detail/linkage.hpp); do
// not include directly.
#pragma once

namespace chunkpipe::detail {

CHUNKPIPE_INLINE std::string describe_io(const Endpoints& e, const std::string& threads, const std::string& ahead) {
  bool reads = false, writes = false;
  for (const auto& i : e.in) reads = reads || static_cast<bool>(i.read_at);
  for (const auto& o : e.out) writes = writes || static_cast<bool>(o.write_at);
  std::string s;
  if (reads) {
    s += "source read at any offset, each chunk of 1 MiB or more over " + threads + ", ahead " + ahead;
    if (e.in_note) s += "; " + e.in_note();
  }
  if (writes) {
    s += std::string(s.empty() ? "" : " | ") + "sink written at any offset, a chunk a call";
    if (e.out_note) s += "; " + e.out_note();
  }
  return s;
}

CHUNKPIPE_INLINE IoBytes io_bytes(const Endpoints& e, std::size_t elems) noexcept {
  IoBytes b;
  for (const auto& in : e.in) b.in += elems * in.elem_size;
  const std::size_t records = e.packed ? e.packed->emitted : (elems + e.per_record - 1) / e.per_record;
  for (const auto& out : e.out) b.out += records * out.elem_size;
  return b;
}

}  // namespace chunkpipe::detail
