// SPDX-License-Identifier: MIT
// Float test data whose sums round (uniform in [-1000, 1000), each scaled
// by 1 + k/1000 for a k in 0..6, so that low bits differ), a float's
// bits, for tests that compare results bit for bit, and poisoned outputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace test_support {

/// `n` floats from `seed`, the same on every platform with a given
/// standard library.
inline std::vector<float> noisy(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1000.f, 1000.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng) * (1.0f + static_cast<float>(rng() % 7) * 1e-3f);
  return v;
}

/// The bits of `f`, so that a check compares them exactly (NaN and -0 included).
inline std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

/// `n` elements of bytes 0x7f (a huge float, not a result any test makes),
/// for outputs that must show what a run left unwritten.
template <class T>
std::vector<T> poisoned(std::size_t n) {
  std::vector<T> v(n);
  std::memset(v.data(), 0x7f, n * sizeof(T));
  return v;
}

}  // namespace test_support
