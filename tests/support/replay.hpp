// SPDX-License-Identifier: MIT
// A chunkpipe Source that hands out a vector's elements in order, so a
// test can run the same data as a range and as a Source of unknown length.
#pragma once

#include <chunkpipe/io.hpp>

#include <algorithm>
#include <cstddef>
#include <vector>

namespace test_support {

/// A Source over `data`, which must outlive the run: each call fills the
/// slot with the next elements and ends the input after the last.
template <class T>
auto replay(const std::vector<T>& data) {
  return chunkpipe::source<T>([&data, next = std::size_t{0}](std::size_t, ::cuda::std::span<T> slot) mutable {
    const std::size_t k = std::min(slot.size(), data.size() - next);
    std::copy(data.begin() + static_cast<std::ptrdiff_t>(next), data.begin() + static_cast<std::ptrdiff_t>(next + k),
              slot.begin());
    next += k;
    return k;
  });
}

}  // namespace test_support
