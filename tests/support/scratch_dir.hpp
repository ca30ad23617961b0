// SPDX-License-Identifier: MIT
// A temporary directory of a test's own, for tests that read and write
// files (files_test.cpp, host_report_test.cpp, the GPU streaming test):
//   test_support::ScratchDir dir("chunkpipe_files_test");
//   const std::string in = dir / "in.f32";
// mkdtemp makes the name unique, so test cases that run at once (ctest -j,
// one process each) never share a directory, and the destructor removes
// it with everything in it, whether the test passed or threw.
#pragma once

#include <stdlib.h>  // mkdtemp (POSIX)

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

namespace test_support {

class ScratchDir {
 public:
  /// Creates `<temporary directory>/<prefix>.XXXXXX`; throws
  /// std::runtime_error if it cannot.
  explicit ScratchDir(const std::string& prefix = "chunkpipe_test") {
    std::string pattern = (std::filesystem::temp_directory_path() / (prefix + ".XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      const int e = errno;
      throw std::runtime_error("mkdtemp(" + pattern + ") failed: " + std::strerror(e));
    }
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;  // a test's failure is the message, not this
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  /// The path of `name` inside the directory, as the string file_source,
  /// file_sink and std::ofstream take.
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  /// The directory itself.
  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace test_support
