// SPDX-License-Identifier: MIT
// Definitions for detail/op_records.hpp. Included at its bottom where chunkpipe is
// header-only, or once by <chunkpipe/compiled.hpp> (detail/linkage.hpp); do
// not include directly.
#pragma once

namespace chunkpipe::detail {

CHUNKPIPE_INLINE void OpRecords::configure(std::size_t steps, std::size_t depth, std::size_t reach) {
  depth_ = depth;
  reach_ = reach;
  ring_.resize(steps);
  for (auto& events : ring_) {
    while (events.size() < reach_) events.push_back(Event::create());
  }
  records_.assign(steps * reach_, OpRecord{});
  last_.assign(steps * depth_, OpRecord{});
}

CHUNKPIPE_INLINE const OpRecord& OpRecords::of(std::size_t id) const {
  const OpRecord& r = records_[id % records_.size()];
  if (r.id == id) return r;
  for (const OpRecord& l : last_) {
    if (l.id == id) return l;
  }
  throw std::logic_error("chunkpipe: internal error: op #" + std::to_string(id) +
                         " is older than the executor's wait window");
}

}  // namespace chunkpipe::detail
