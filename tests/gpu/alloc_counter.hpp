// SPDX-License-Identifier: MIT
// Counts calls of the global operator new between start() and stop(), from
// every thread. Linking alloc_counter.cpp replaces the global allocator.
#pragma once

#include <cstddef>

namespace test_alloc {
void start();
std::size_t stop();  ///< allocations since start()
}  // namespace test_alloc
