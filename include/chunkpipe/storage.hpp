// SPDX-License-Identifier: MIT
/// \file
/// What a directory's storage gives a pipeline's host threads, measured the
/// way measure.cuh measures the link: the rates a file_source reads and a
/// durable file_sink writes at, for the simulator's Machine (simulate.hpp).
/// Host-only, POSIX.
///
/// \code
/// const chunkpipe::StorageRates r = chunkpipe::measure_storage("/data");
/// chunkpipe::Machine m = chunkpipe::machines::h200_pcie5();
/// m.storage_read_gbps = r.read_gbps;
/// m.storage_write_gbps = r.write_gbps;
/// \endcode
#pragma once

#include <chunkpipe/errors.hpp>
#include <chunkpipe/detail/file_reader.hpp>  // detail::Descriptor, quoted, errno_text

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace chunkpipe {

/// What a directory's storage gives a file_source and a durable file_sink
/// (measure_storage()): the figures for Machine::storage_read_gbps and
/// Machine::storage_write_gbps (simulate.hpp), so that a file run's
/// prediction and report say where its time goes.
struct StorageRates {
  double read_gbps = 0.0;           ///< preads of a file just written (from the page cache, where it fits)
  double uncached_read_gbps = 0.0;  ///< the same once the file was dropped from the page cache
  double write_gbps = 0.0;          ///< pwrites of a new file with the fsync at the end
};

/// Measures `dir`'s storage as a pipeline's team of `threads` host threads
/// uses it (Options::host_threads): a new file of `bytes` written in 8 MiB
/// pieces by all of them and fsynced, read back the same way, dropped from
/// the page cache (posix_fadvise) and read again; then removed. Blocks for
/// the time that takes (three passes over `bytes`). Throws pipeline_error
/// naming the path and the byte offset for a failed open, read or write,
/// and config_error for `bytes` or `threads` of 0.
inline StorageRates measure_storage(const std::string& dir, std::size_t bytes = std::size_t{256} << 20,
                                    int threads = 8) {
  if (bytes == 0 || threads < 1) throw config_error("chunkpipe: measure_storage needs bytes and threads above 0");
  const std::string path = dir + "/chunkpipe_measure_storage." + std::to_string(::getpid()) + ".tmp";
  detail::Descriptor fd(::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!fd.is_open()) {
    const int e = errno;
    throw pipeline_error("chunkpipe: measure_storage cannot create " + detail::quoted(path) + ": " +
                         detail::errno_text(e));
  }
  constexpr std::size_t piece = std::size_t{8} << 20;
  const std::size_t pieces = (bytes + piece - 1) / piece;
  std::string failure;  // the first failure, under `lock`
  std::mutex lock;
  auto pass = [&](bool write) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> team;
    for (int t = 0; t < threads; ++t) {
      team.emplace_back([&, t] {
        std::vector<unsigned char> buf(piece, static_cast<unsigned char>(0x3C + t));
        for (std::size_t p = static_cast<std::size_t>(t); p < pieces; p += static_cast<std::size_t>(threads)) {
          const std::size_t len = std::min(piece, bytes - p * piece);
          const auto at = static_cast<::off_t>(p * piece);
          const ::ssize_t r = write ? ::pwrite(fd.get(), buf.data(), len, at) : ::pread(fd.get(), buf.data(), len, at);
          if (r != static_cast<::ssize_t>(len)) {
            const int e = r < 0 ? errno : (write ? ENOSPC : EIO);
            std::lock_guard<std::mutex> g(lock);
            if (failure.empty()) {
              failure = std::string(write ? "writing " : "reading ") + detail::quoted(path) + " failed at byte offset " +
                        std::to_string(p * piece) + ": " + detail::errno_text(e);
            }
            return;
          }
        }
      });
    }
    for (std::thread& t : team) t.join();
    if (write && failure.empty() && ::fsync(fd.get()) != 0) failure = "fsync of " + detail::quoted(path) + " failed";
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return static_cast<double>(bytes) / s / 1e9;
  };
  StorageRates r;
  r.write_gbps = pass(true);
  if (failure.empty()) r.read_gbps = pass(false);
  if (failure.empty()) {
    (void)::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED);  // clean pages: written and synced
    r.uncached_read_gbps = pass(false);
  }
  (void)fd.close();
  (void)::unlink(path.c_str());
  if (!failure.empty()) throw pipeline_error("chunkpipe: measure_storage: " + failure);
  return r;
}

}  // namespace chunkpipe
