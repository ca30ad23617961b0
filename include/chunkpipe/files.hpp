// SPDX-License-Identifier: MIT
/// \file
/// Files and generators as the two ends of a run, built on Source and Sink
/// (io.hpp). Host-only C++17 on POSIX (open, pread, pwrite, rename); no CUDA.
///
/// \code
/// auto in  = chunkpipe::file_source<float>("big.f32");     // throws now if unreadable
/// auto out = chunkpipe::file_sink<__half>("big.f16");      // writes big.f16.partial
/// pipe.run(in, out);                                       // renamed to big.f16 on success
/// \endcode
///
/// \code
/// pipe.run(chunkpipe::generate<float>(n, [](std::size_t i) { return 0.5f * i; }), y);
/// \endcode
///
/// A file source reads each chunk straight into the pipeline's pinned slot,
/// and a file sink writes each chunk's output straight from its pinned slot:
/// no extra host copy, and no host buffer the size of the file, so files far
/// larger than host RAM stream through. Both run on chunkpipe's host threads
/// while the GPU works on other chunks.
///
/// The objects returned here are cheap handles: copies share one open file,
/// as a run keeps its own copy of its Source and Sink. One run at a time may
/// use a handle.
#pragma once

#include <chunkpipe/detail/file_reader.hpp>
#include <chunkpipe/detail/file_writer.hpp>
#include <chunkpipe/errors.hpp>
#include <chunkpipe/io.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

namespace chunkpipe {

/// How file_sink writes.
struct FileSinkOptions {
  /// Write to `path + ".partial"` (created next to the target when the sink
  /// is made) and rename it to `path` only when the run succeeds; a run that
  /// fails removes it. False writes to `path` itself: for devices and pipes
  /// (/dev/null, a FIFO read by another process), which cannot be renamed
  /// onto; a failed run then leaves whatever it wrote.
  bool temporary = true;
  /// fsync the file before the rename, so that after a crash `path` either
  /// holds the complete output or is absent (or unchanged), never a file
  /// whose name arrived on disk before its data. finish() then waits for the
  /// disk. Off trades that guarantee for not waiting.
  bool sync = true;
  /// Where the run's element 0 goes in the file, in elements: one of
  /// several processes writing its share of one file (shard()). Needs a
  /// regular file, and `shared` (a file truncated or renamed into place
  /// would lose the other shares).
  std::size_t first = 0;
  /// Other writers fill the rest of the file: open it without truncating,
  /// create it if missing, and write this run's elements in place. Needs
  /// temporary off (each writer would rename its own copy over the
  /// others'). The sink neither truncates nor sizes the file: make it empty
  /// (or of its final size) before the writers start, as
  /// examples/mpi_convert.cu does on one rank before a barrier, or bytes of
  /// an older, longer file stay past the end. A failed run leaves what it
  /// wrote.
  bool shared = false;
};

/// Elements [first, first + count) of a file; count unknown_length reads
/// to its end.
struct FileRange {
  std::size_t first = 0;               ///< index of the range's first element in the file
  std::size_t count = unknown_length;  ///< elements in the range; unknown_length: to the end of the file
};

/// A Source that reads a binary file of T (native byte order, no header)
/// chunk by chunk straight into the pipeline's pinned slots; the run's
/// length is the file's size over sizeof(T), found as it is read.
///
/// Opens the file now (blocking on the open and, for a FIFO, until a writer
/// opens it), so a missing or unreadable file, a directory, or a regular
/// file whose size is not a whole number of T throws pipeline_error (naming
/// the path and the reason, or the size) before anything is queued. During
/// a run each call blocks a chunkpipe host thread on the read (the disk or
/// the page cache; for a pipe, its writer) while the GPU works on earlier
/// chunks. A read error, a file that turns out not to be a whole number of
/// T (a pipe), or a file that changed size since it was opened throws
/// pipeline_error with the byte offset, which ends the run.
///
/// A regular file is read from its start by every run that uses the
/// handle; a pipe or device can feed one run. The file stays open while any
/// copy of the handle lives (a pipeline keeps its last run's copy).
///
/// A regular file of 64 MiB or more that is not in the page cache when
/// opened (sampled with mincore) is read with O_DIRECT where the file
/// system allows, its unaligned tail through the page cache; `.fn.direct_io()`
/// says which. Direct reads of an uncached file are faster and leave the
/// page cache to the program; a cached file is read from the cache.
template <class T>
Source<T, CHUNKPIPE_UNSPECIFIED(detail::FileReader<T>)> file_source(const std::string& path) {
  static_assert(std::is_trivially_copyable_v<T>, "chunkpipe::file_source reads trivially copyable elements");
  auto s = std::make_shared<detail::FileReaderState>();
  s->path = path;
  s->fd = detail::Descriptor(detail::open_retrying(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!s->fd.is_open()) {
    const int e = errno;
    throw pipeline_error("chunkpipe: cannot open " + detail::quoted(path) + " for reading: " + detail::errno_text(e));
  }
  struct ::stat st {};
  if (::fstat(s->fd.get(), &st) != 0) {
    const int e = errno;
    throw pipeline_error("chunkpipe: cannot stat " + detail::quoted(path) + ": " + detail::errno_text(e));
  }
  if (S_ISDIR(st.st_mode)) {
    throw pipeline_error("chunkpipe: cannot read " + detail::quoted(path) + ": " + detail::errno_text(EISDIR));
  }
  s->positional = S_ISREG(st.st_mode);
  // Some regular files (under /proc, say) report 0 bytes and still have
  // content: only a non-zero size is taken as known.
  s->size_known = s->positional && st.st_size > 0;
  s->size = static_cast<std::uint64_t>(st.st_size);
  if (s->size_known && s->size % sizeof(T) != 0) {
    throw pipeline_error("chunkpipe: " + detail::quoted(path) + " holds " + std::to_string(s->size) +
                         " bytes, which is not a whole number of " + std::to_string(sizeof(T)) +
                         "-byte elements");
  }
#if defined(POSIX_FADV_SEQUENTIAL)
  // A hint for deeper read-ahead; nothing depends on it.
  if (s->positional) (void)::posix_fadvise(s->fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
#endif
  detail::choose_direct_io(*s);
  return {detail::FileReader<T>(std::move(s))};
}

/// A Source that reads elements [range.first, range.first + range.count)
/// of a regular binary file of T (count unknown_length: to its end), as
/// file_source(path) reads a whole file: one MPI rank's share of an input
/// (shard()). The run's length is the range's. Opens the file now and
/// throws pipeline_error, naming the path, if it cannot be read, is not a
/// regular file, is not a whole number of T, or does not hold the range; a
/// file that shrinks under the run ends it with pipeline_error.
template <class T>
Source<T, CHUNKPIPE_UNSPECIFIED(detail::FileReader<T>)> file_source(const std::string& path, FileRange range) {
  auto src = file_source<T>(path);
  detail::FileReaderState& s = src.fn.state();
  if (!s.positional) {
    throw pipeline_error("chunkpipe: file_source " + detail::quoted(path) +
                         " takes a range only of a regular file (this is a pipe or device)");
  }
  const std::uint64_t elems = s.size / sizeof(T);
  const bool to_end = range.count == unknown_length;
  if (range.first > elems || (!to_end && range.count > elems - range.first)) {
    throw pipeline_error("chunkpipe: " + detail::quoted(path) + " holds " + std::to_string(elems) + " elements of " +
                         std::to_string(sizeof(T)) + " bytes, not the range of " +
                         (to_end ? std::string("those from ") + std::to_string(range.first)
                                 : std::to_string(range.count) + " from " + std::to_string(range.first)));
  }
  s.ranged = true;
  s.base = static_cast<std::uint64_t>(range.first) * sizeof(T);
  s.limit = (to_end ? elems - range.first : static_cast<std::uint64_t>(range.count)) * sizeof(T);
  return src;
}

/// A Sink that writes each chunk's output (U in native byte order, no
/// header) to a file as it arrives, from the pinned slot, so the output
/// never has to fit in host memory.
///
/// By default the file is written as `path + ".partial"`, created now, and
/// renamed to `path` (replacing any file there, or a symbolic link itself)
/// by finish() once the run succeeded; a run that fails removes it, and an
/// existing `path` is left as it was. Devices and pipes need
/// `options.temporary = false` (see FileSinkOptions).
///
/// Constructing blocks on creating the file and throws pipeline_error,
/// naming the path and the reason, if it cannot be created (a directory
/// that does not exist or is not writable), or `path` is a directory, or a
/// device or pipe while `options.temporary` is on. During a run each call
/// blocks a chunkpipe host thread on the write (the page cache, or the disk
/// when the system holds back dirty pages); a failed or short write (ENOSPC,
/// EIO, EFBIG) throws pipeline_error naming the path, the byte offset and
/// the reason, which ends the run. finish() blocks on fsync when
/// `options.sync` is on, and throws pipeline_error (after removing the
/// temporary) if flushing, closing or renaming fails.
///
/// A handle writes one run: using it again throws pipeline_error. Dropping
/// it before its run concluded removes the temporary.
template <class U>
Sink<U, CHUNKPIPE_UNSPECIFIED(detail::FileWriter<U>)> file_sink(const std::string& path, FileSinkOptions options = {}) {
  static_assert(std::is_trivially_copyable_v<U>, "chunkpipe::file_sink writes trivially copyable elements");
  struct ::stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      throw pipeline_error("chunkpipe: cannot write " + detail::quoted(path) + ": " + detail::errno_text(EISDIR));
    }
    // Renaming a file onto /dev/null would replace the device (root may).
    if (options.temporary && !S_ISREG(st.st_mode)) {
      throw pipeline_error("chunkpipe: " + detail::quoted(path) +
                           " is not a regular file (a device, pipe or socket), so a temporary cannot be renamed "
                           "onto it; write it in place with FileSinkOptions{.temporary = false}");
    }
  }
  if (options.shared && options.temporary) {
    throw pipeline_error("chunkpipe: file_sink " + detail::quoted(path) +
                         ": a shared file is written in place; set FileSinkOptions::temporary to false");
  }
  if (options.first != 0 && !options.shared) {
    throw pipeline_error("chunkpipe: file_sink " + detail::quoted(path) + ": FileSinkOptions::first " +
                         std::to_string(options.first) +
                         " writes one share of a file, which needs shared (truncating it would lose the others)");
  }
  auto s = std::make_shared<detail::FileWriterState>();
  s->path = path;
  s->temporary = options.temporary;
  s->sync = options.sync;
  s->temp = options.temporary ? path + ".partial" : path;
  s->base = static_cast<std::uint64_t>(options.first) * sizeof(U);
  // O_TRUNC: a temporary left by a run that crashed is ours to reuse; a
  // shared file keeps what the other writers put there.
  s->fd = detail::Descriptor(detail::open_retrying(
      s->temp.c_str(), O_WRONLY | O_CREAT | (options.shared ? 0 : O_TRUNC) | O_CLOEXEC, 0666));
  if (!s->fd.is_open()) {
    const int e = errno;
    s->concluded = true;  // nothing was created: nothing to remove
    throw pipeline_error("chunkpipe: cannot create " + s->where() + ": " + detail::errno_text(e));
  }
  if (::fstat(s->fd.get(), &st) != 0) {
    const int e = errno;
    throw pipeline_error("chunkpipe: cannot stat " + s->where() + ": " + detail::errno_text(e));
  }
  s->positional = S_ISREG(st.st_mode);
  if (s->base != 0 && !s->positional) {
    throw pipeline_error("chunkpipe: file_sink " + s->where() + " cannot seek, so FileSinkOptions::first must be 0");
  }
  return {detail::FileWriter<U>(std::move(s))};
}

namespace detail {

// The Source functor generate() makes: element i is fn(i), computed on a
// chunkpipe host thread as each chunk is filled. Not file machinery, and
// small, so it stays beside its factory.
template <class T, class F>
struct Generate {
  std::size_t count;
  F fn;

  std::size_t operator()(std::size_t chunk, ::cuda::std::span<T> slot) {
    // Every chunk before this one was full, so its first element is here.
    const std::size_t begin = chunk * slot.size();
    if (begin >= count) return 0;
    const std::size_t n = std::min(slot.size(), count - begin);
    for (std::size_t i = 0; i < n; ++i) slot[i] = static_cast<T>(fn(begin + i));
    return n;
  }
};

}  // namespace detail

/// A Source of `count` elements, element i being `fn(i)` converted to T:
/// input computed on the host rather than read. `fn` is called on a
/// chunkpipe host thread, in order of i, while the GPU works on earlier
/// chunks; each run calls its own copy, so a stateful `fn` starts afresh.
/// What it throws ends the run. The run learns the length as the input
/// ends, as with any Source. Throws config_error if `count` is
/// unknown_length: a generator must end.
template <class T, class F>
Source<T, CHUNKPIPE_UNSPECIFIED(detail::Generate<T, std::decay_t<F>>)> generate(std::size_t count, F&& fn) {
  static_assert(std::is_convertible_v<std::invoke_result_t<std::decay_t<F>&, std::size_t>, T>,
                "chunkpipe::generate: fn(i) must return something convertible to T");
  if (count == unknown_length) {
    throw config_error("chunkpipe: generate needs a finite count (got unknown_length)");
  }
  return {detail::Generate<T, std::decay_t<F>>{count, std::forward<F>(fn)}};
}

}  // namespace chunkpipe
