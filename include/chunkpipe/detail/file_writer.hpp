// SPDX-License-Identifier: MIT
// FileWriter, the Sink functor behind file_sink (files.hpp), and what its
// copies share. Kept out of files.hpp so that the public header reads as
// the API; this is how a chunk is written: pwrite from its pinned slot at
// its own offset (or in order to a pipe), write-back started per chunk, and
// a temporary that finish() fsyncs and renames onto the target and a
// failed run removes. Host-only, POSIX; no CUDA.
#pragma once

#include <chunkpipe/detail/file_reader.hpp>  // Descriptor, quoted, errno_text, max_io_bytes
#include <chunkpipe/errors.hpp>

#include <cuda/std/span>

#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>

namespace chunkpipe::detail {

/// What the copies of one file_sink share.
struct FileWriterState {
  std::string path;  ///< the target
  std::string temp;  ///< what is written: path + ".partial", or path itself
  bool temporary = true;
  bool sync = true;
  std::uint64_t base = 0;  ///< byte where the run's element 0 goes (FileSinkOptions::first)
  Descriptor fd;
  bool positional = false;    ///< a regular file: pwrite at each chunk's offset
  std::uint64_t written = 0;  ///< sequential files: bytes written so far
  bool concluded = false;     ///< finish() or abort() ran

  FileWriterState() = default;
  FileWriterState(const FileWriterState&) = delete;
  FileWriterState& operator=(const FileWriterState&) = delete;
  /// A sink dropped before its run concluded (a run refused before it
  /// started, or never made) leaves no temporary behind.
  ~FileWriterState() { discard(); }

  std::string where() const {
    return temporary ? detail::quoted(path) + " (temporary " + detail::quoted(temp) + ")" : detail::quoted(path);
  }

  /// Unless the run already concluded: closes the file and removes the
  /// temporary. Never throws.
  void discard() noexcept {
    if (concluded) return;
    concluded = true;
    (void)fd.close();
    if (temporary) (void)::unlink(temp.c_str());
  }
};

template <class U>
class FileWriter {
 public:
  explicit FileWriter(std::shared_ptr<FileWriterState> state) : state_(std::move(state)) {}

  /// Writes one chunk's output at its place in the file.
  void operator()(std::size_t, std::size_t offset, ::cuda::std::span<const U> data) const { write_at(offset, data); }

  /// A regular file is written where each chunk lies (write_at), a chunk
  /// a call; a pipe, a FIFO or a device in order.
  bool positional() const noexcept { return state_->positional; }

  /// How the file is written, for a run's report (Report::io).
  std::string io_note() const {
    const FileWriterState& s = *state_;
    std::string note = "file_sink " + s.where();
    if (!s.positional) return note + " written in order";
    return note + (s.sync ? ": write-back started per chunk, fsync at the end" : ": no fsync (FileSinkOptions::sync off)");
  }

  /// Writes `data` as the output's elements from element `offset`. Safe to
  /// call from several threads at once on a positional() file. Throws
  /// pipeline_error naming the path and the byte offset for a write that
  /// fails (a full disk included), or a sink already concluded.
  void write_at(std::size_t offset, ::cuda::std::span<const U> data) const {
    FileWriterState& s = *state_;
    if (s.concluded) throw reused(s);
    const std::uint64_t at = s.base + static_cast<std::uint64_t>(offset) * sizeof(U);
    if (!s.positional && at != s.written) {
      throw pipeline_error("chunkpipe: file_sink " + s.where() + " cannot seek, and got byte offset " +
                           std::to_string(at) + " after writing " + std::to_string(s.written) + " bytes");
    }
    const auto* src = reinterpret_cast<const unsigned char*>(data.data());
    const std::size_t bytes = data.size() * sizeof(U);
    std::size_t done = 0;
    while (done < bytes) {
      const std::size_t ask = std::min(bytes - done, max_io_bytes);
      const ::ssize_t r = s.positional ? ::pwrite(s.fd.get(), src + done, ask, static_cast<::off_t>(at + done))
                                       : ::write(s.fd.get(), src + done, ask);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        // A write that moved nothing without an error is a device that
        // takes no more: report it as the full disk it most likely is.
        const int e = r < 0 ? errno : ENOSPC;
        throw pipeline_error("chunkpipe: writing " + s.where() + " failed at byte offset " +
                             std::to_string(at + done) + ": " + detail::errno_text(e));
      }
      done += static_cast<std::size_t>(r);  // short writes (a signal, a nearly full disk) go round again
    }
    if (!s.positional) s.written += bytes;
#if defined(SYNC_FILE_RANGE_WRITE)
    // A durable sink fsyncs at the end; starting this chunk's write-back now
    // lets the disk work while later chunks are read and computed, so that
    // fsync waits only for the last few (storage_bench, "file -> GPU ->
    // file"). Advice only: an error here is fsync's to report.
    if (s.sync && s.positional && bytes != 0) {
      (void)::sync_file_range(s.fd.get(), static_cast<::off_t>(at), static_cast<::off_t>(bytes), SYNC_FILE_RANGE_WRITE);
    }
#endif
  }

  /// After a run that succeeded: flushes, closes and renames the temporary
  /// to the target. On failure removes the temporary and throws.
  void finish() const {
    FileWriterState& s = *state_;
    if (s.concluded) throw reused(s);  // a second run that produced nothing
    auto fail = [&](const std::string& what, int e) {
      s.discard();
      throw pipeline_error("chunkpipe: finishing " + s.where() + " failed: " + what + ": " + detail::errno_text(e));
    };
    // Devices and pipes have nothing to flush (fsync would fail with EINVAL).
    if (s.sync && s.positional && ::fsync(s.fd.get()) != 0) fail("fsync", errno);
    // close() is where some file systems (NFS) report a failed write.
    if (const int e = s.fd.close(); e != 0) fail("close", e);
    if (s.temporary && std::rename(s.temp.c_str(), s.path.c_str()) != 0) fail("rename to the target", errno);
    s.concluded = true;
  }

  /// After a run that failed: closes and removes the temporary, so no
  /// partial output can pass for a complete one. Never throws.
  void abort() const noexcept { state_->discard(); }

 private:
  static pipeline_error reused(const FileWriterState& s) {
    return pipeline_error("chunkpipe: the file_sink for " + detail::quoted(s.path) +
                          " already finished or aborted a run; make a new file_sink for each run");
  }

  std::shared_ptr<FileWriterState> state_;
};

}  // namespace chunkpipe::detail
