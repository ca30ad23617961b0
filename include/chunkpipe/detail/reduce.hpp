// SPDX-License-Identifier: MIT
// The fixed combination order of a Reduce stage (stage.hpp), written once
// for the host; the CUDA kernel (reduce_kernel.cuh) follows the same order,
// so both backends fold a segment to the same bits. Host-only.
//
// A segment of `len` elements folds as reduce_threads lanes: lane t folds
// elements t, t + 256, t + 512, ... in that order, starting from element t
// converted to T; then lanes pair up in a binary tree, lane t taking lane
// t + s for s = 128, 64, ..., 1 where lane t + s holds an element. Lanes
// past the segment's end hold nothing, so no identity is ever needed.
#pragma once

#include <cstddef>

namespace chunkpipe::detail {

/// Lanes (CUDA threads) that fold one segment.
inline constexpr unsigned reduce_threads = 256;

/// Folds one segment of `len` >= 1 elements the way the device does.
template <class T, class Op, class I>
T fold_segment(const Op& op, const I* in, std::size_t len) {
  T lane[reduce_threads];
  const std::size_t active = len < reduce_threads ? len : reduce_threads;
  for (std::size_t t = 0; t < active; ++t) {
    T acc = static_cast<T>(in[t]);
    for (std::size_t k = t + reduce_threads; k < len; k += reduce_threads) acc = op(acc, static_cast<T>(in[k]));
    lane[t] = acc;
  }
  for (std::size_t s = reduce_threads / 2; s > 0; s /= 2) {
    for (std::size_t t = 0; t < s && t + s < active; ++t) lane[t] = op(lane[t], lane[t + s]);
  }
  return lane[0];
}

/// Folds `count` elements into ceil(count / segment) partials, one per
/// segment, as the device does for one chunk.
template <class T, class Op, class I>
void fold_segments(const Op& op, const I* in, std::size_t count, std::size_t segment, T* out) {
  for (std::size_t k = 0, at = 0; at < count; ++k, at += segment) {
    const std::size_t len = count - at < segment ? count - at : segment;
    out[k] = ::chunkpipe::detail::fold_segment<T>(op, in + at, len);
  }
}

}  // namespace chunkpipe::detail
