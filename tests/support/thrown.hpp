// SPDX-License-Identifier: MIT
// What a call throws, as text, for tests that check error messages with
// the macros both Catch2 2.x and 3.x have:
//   CHECK(contains(thrown_by([&] { pipe.run(x, short_out); }), "needed"));
#pragma once

#include <exception>
#include <string>

namespace test_support {

/// The what() of the std::exception `f()` throws, or "(nothing thrown)".
template <class F>
std::string thrown_by(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace test_support
