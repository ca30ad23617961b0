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

#include <chunkpipe/errors.hpp>
#include <chunkpipe/io.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

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

namespace detail {

/// Bytes moved per system call at most: Linux moves at most 2 GiB - 4 KiB
/// per read or write anyway, and a bound keeps the loops portable.
inline constexpr std::size_t max_io_bytes = std::size_t{1} << 30;

/// What O_DIRECT reads are aligned to (address, offset and length): the
/// page size, which covers the logical block size of any disk.
inline constexpr std::size_t direct_io_align = 4096;

/// Files smaller than this are never read with O_DIRECT: the sample below
/// is too coarse for them, and they are read in a blink either way.
inline constexpr std::uint64_t direct_io_min_bytes = std::uint64_t{64} << 20;

/// 'path', for messages. Always called as detail::quoted: unqualified, a
/// non-const std::string argument would find std::quoted (<iomanip>) by
/// argument-dependent lookup, a better match that returns no std::string.
inline std::string quoted(const std::string& path) { return "'" + path + "'"; }

inline std::string errno_text(int e) { return std::strerror(e); }

/// An open descriptor, closed once by whoever holds it last. close() errors
/// are reported by the callers that need them (a sink's finish()).
class Descriptor {
 public:
  Descriptor() = default;
  explicit Descriptor(int fd) noexcept : fd_(fd) {}
  Descriptor(Descriptor&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Descriptor& operator=(Descriptor&& o) noexcept {
    if (this != &o) {
      (void)close();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  ~Descriptor() { (void)close(); }

  int get() const noexcept { return fd_; }
  bool is_open() const noexcept { return fd_ >= 0; }
  /// Closes now; returns 0 or the errno of a failed close.
  int close() noexcept {
    if (fd_ < 0) return 0;
    const int rc = ::close(fd_);
    fd_ = -1;
    // Linux releases the descriptor even when close fails (EINTR included):
    // retrying could close a descriptor another thread just opened.
    return rc == 0 ? 0 : errno;
  }

 private:
  int fd_ = -1;
};

/// open(2) again while a signal interrupts it (a FIFO's open waits for
/// the other end, and a handler without SA_RESTART ends that wait with
/// EINTR). Returns the descriptor or -1 with errno set.
inline int open_retrying(const char* path, int flags, ::mode_t mode = 0) noexcept {
  int fd;
  do {
    fd = ::open(path, flags, mode);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

/// What the copies of one file_source share.
struct FileReaderState {
  std::string path;
  Descriptor fd;
  /// A regular file: chunk k is read with pread at its own offset, so every
  /// run reads the file from its start. Otherwise (a pipe, a FIFO, a
  /// device) it is read sequentially and can feed one run only.
  bool positional = false;
  bool size_known = false;     ///< a regular file that was not empty when opened
  std::uint64_t size = 0;      ///< its bytes then
  std::uint64_t consumed = 0;  ///< sequential files: bytes read so far
  /// A range of a regular file (FileRange): its first byte and length. The
  /// whole file otherwise.
  bool ranged = false;
  std::uint64_t base = 0;
  std::uint64_t limit = 0;
  /// A second descriptor with O_DIRECT, open where file_source chose
  /// direct I/O (choose_direct_io); closed for good, and every read
  /// buffered, after a direct read the file system refuses.
  Descriptor direct;
  std::atomic<bool> direct_ok{false};
  std::atomic<std::uint64_t> direct_bytes{0};  ///< read with O_DIRECT so far
};

/// Where the file is not in the page cache, reads it with O_DIRECT: uncached,
/// eight threads of direct reads beat eight of buffered ones on the test
/// machine's disk, and cached, a direct read is far slower than the page
/// cache (benchmarks/RESULTS.md, "Storage (benchmarks/storage_bench)"), so
/// the choice follows residency: mincore() over 64 pages spread through the
/// file, and direct only where fewer than 8 of them are cached. A file
/// system that refuses O_DIRECT (tmpfs) leaves the file buffered. Never
/// throws.
inline void choose_direct_io(FileReaderState& s) noexcept {
#if defined(O_DIRECT)
  if (!s.positional || s.size < direct_io_min_bytes) return;
  const long page = ::sysconf(_SC_PAGESIZE);
  if (page <= 0) return;
  void* map = ::mmap(nullptr, static_cast<std::size_t>(s.size), PROT_READ, MAP_SHARED, s.fd.get(), 0);
  if (map == MAP_FAILED) return;
  int cached = 0;
  const std::uint64_t pages = s.size / static_cast<std::uint64_t>(page);
  for (std::uint64_t k = 0; k < 64; ++k) {
    const std::uint64_t p = pages * k / 64;
    unsigned char in_core = 0;
    if (::mincore(static_cast<unsigned char*>(map) + p * static_cast<std::uint64_t>(page),
                  static_cast<std::size_t>(page), &in_core) == 0 && (in_core & 1) != 0) {
      ++cached;
    }
  }
  ::munmap(map, static_cast<std::size_t>(s.size));
  if (cached >= 8) return;
  s.direct = Descriptor(open_retrying(s.path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC));
  s.direct_ok.store(s.direct.is_open(), std::memory_order_relaxed);
#else
  (void)s;
#endif
}

template <class T>
class FileReader {
 public:
  explicit FileReader(std::shared_ptr<FileReaderState> state) : state_(std::move(state)) {}

  /// What its copies share (file_source(path, range) narrows it).
  FileReaderState& state() const noexcept { return *state_; }

  /// Fills `slot` with the next elements of the file; returns how many.
  std::size_t operator()(std::size_t chunk, ::cuda::std::span<T> slot) const {
    // Every chunk before this one was full (a short one ends the input), so
    // the chunk's place in the file follows from its index alone.
    return read_span(static_cast<std::uint64_t>(chunk) * slot.size() * sizeof(T), slot, chunk == 0);
  }

  /// A regular file (or a range of one) is read where each chunk lies, by
  /// several threads at once (read_at); a pipe, a FIFO or a device in order.
  bool positional() const noexcept { return state_->positional; }

  /// True while the file is read with O_DIRECT (file_source chose it: the
  /// file was not in the page cache when opened), false where it is read
  /// through the page cache. Never blocks.
  bool direct_io() const noexcept { return state_->direct_ok.load(std::memory_order_relaxed); }

  /// How the file is read, for a run's report (Report::io).
  std::string io_note() const {
    const FileReaderState& s = *state_;
    if (!s.positional) return "file_source " + detail::quoted(s.path) + " read in order (not seekable)";
    return "file_source " + detail::quoted(s.path) +
           (direct_io() ? " read with O_DIRECT (not in the page cache when opened)" : " read through the page cache");
  }

  /// Bytes read with O_DIRECT so far, by every run of this handle (what
  /// direct_io() did: a slot or a part that is not on 4 KiB is read
  /// through the page cache). Never blocks.
  std::uint64_t direct_bytes() const noexcept { return state_->direct_bytes.load(std::memory_order_relaxed); }

  /// Fills `dst` with the file's elements from element `offset` (of the
  /// range, for file_source(path, range)); returns how many: fewer where
  /// the file ends. Safe to call from several threads at once on a
  /// positional() file. Throws pipeline_error naming the path and the byte
  /// offset for a read that fails, and for a file that changed size.
  std::size_t read_at(std::size_t offset, ::cuda::std::span<T> dst) const {
    return read_span(static_cast<std::uint64_t>(offset) * sizeof(T), dst, offset == 0);
  }

 private:
  // Elements at byte `offset` of the file (of the range) into `slot`.
  // `first`: the input's first read (a seekable file's message differs).
  std::size_t read_span(std::uint64_t offset, ::cuda::std::span<T> slot, bool first) const {
    FileReaderState& s = *state_;
    if (s.ranged) return read_range(s, offset, slot);
    const std::size_t want = slot.size() * sizeof(T);
    // A part of a chunk wholly past the end (read_at splits chunks): the
    // file must still end where it did.
    if (s.positional && s.size_known && offset >= s.size && want != 0) {
      unsigned char probe = 0;
      if (pread_all(s, &probe, 1, offset) != 0) {
        throw pipeline_error("chunkpipe: " + detail::quoted(s.path) + " changed size while being read: it held " +
                             std::to_string(s.size) + " bytes when opened, and has more at byte offset " +
                             std::to_string(offset));
      }
      return 0;
    }
    if (!s.positional && offset != s.consumed) {
      throw pipeline_error("chunkpipe: file_source " + detail::quoted(s.path) +
                           (first ? " is not seekable and an earlier run already read from it; make a new "
                                    "file_source for each run"
                                  : " was asked for byte offset " + std::to_string(offset) + " out of order"));
    }
    const std::size_t got = pread_all(s, reinterpret_cast<unsigned char*>(slot.data()), want, offset);
    const std::uint64_t end = offset + got;
    const bool ended = got < want;
    // A file that changed under the run: its output would silently be a mix.
    if (s.size_known && (ended ? end != s.size : end > s.size)) {
      throw pipeline_error("chunkpipe: " + detail::quoted(s.path) + " changed size while being read: it held " +
                           std::to_string(s.size) + " bytes when opened, and " +
                           (ended ? "ended at byte " : "has at least ") + std::to_string(end) +
                           " when read at byte offset " + std::to_string(offset));
    }
    if (ended && end % sizeof(T) != 0) {
      throw pipeline_error("chunkpipe: " + detail::quoted(s.path) + " ended after " + std::to_string(end) +
                           " bytes, which is not a whole number of " + std::to_string(sizeof(T)) +
                           "-byte elements (a truncated or foreign file?)");
    }
    return got / sizeof(T);
  }

  // Up to `want` bytes at byte `offset` (pread), or next (read, for a pipe),
  // stopping early only at the end of the file. Throws pipeline_error with
  // the offset if a read fails.
  static std::size_t pread_all(FileReaderState& s, unsigned char* dst, std::size_t want, std::uint64_t offset) {
    std::size_t got = 0;
    while (got < want) {
      const std::size_t ask = std::min(want - got, max_io_bytes);
      // Direct I/O where the file system can take it: the address, the
      // offset and the length on direct_io_align (a pinned slot's parts
      // are; a ragged tail is not, and is read through the page cache).
      const bool direct = s.positional && s.direct_ok.load(std::memory_order_relaxed) &&
                          aligned(dst + got, offset + got, ask - ask % direct_io_align) &&
                          ask >= direct_io_align;
      const std::size_t take = direct ? ask - ask % direct_io_align : ask;
      const ::ssize_t r =
          direct ? ::pread(s.direct.get(), dst + got, take, static_cast<::off_t>(offset + got))
          : s.positional ? ::pread(s.fd.get(), dst + got, take, static_cast<::off_t>(offset + got))
                         : ::read(s.fd.get(), dst + got, take);
      if (r < 0 && direct && errno == EINVAL) {
        // The file system takes O_DIRECT opens but not these reads: read
        // through the page cache from now on.
        s.direct_ok.store(false, std::memory_order_relaxed);
        continue;
      }
      if (r < 0) {
        if (errno == EINTR) continue;
        const int e = errno;
        throw pipeline_error("chunkpipe: reading " + detail::quoted(s.path) + " failed at byte offset " +
                             std::to_string(offset + got) + ": " + detail::errno_text(e));
      }
      if (r == 0) break;  // end of file
      if (direct) s.direct_bytes.fetch_add(static_cast<std::uint64_t>(r), std::memory_order_relaxed);
      got += static_cast<std::size_t>(r);
      if (!s.positional) s.consumed += static_cast<std::uint64_t>(r);
    }
    return got;
  }

  static bool aligned(const unsigned char* dst, std::uint64_t offset, std::size_t bytes) noexcept {
    return reinterpret_cast<std::uintptr_t>(dst) % direct_io_align == 0 && offset % direct_io_align == 0 &&
           bytes % direct_io_align == 0;
  }

  // A range of a regular file: the chunk's share of it, all of which the
  // file held when opened, so a short read means the file shrank.
  static std::size_t read_range(FileReaderState& s, std::uint64_t rel, ::cuda::std::span<T> slot) {
    if (rel >= s.limit) return 0;
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(slot.size() * sizeof(T), s.limit - rel));
    const std::size_t got = pread_all(s, reinterpret_cast<unsigned char*>(slot.data()), want, s.base + rel);
    if (got < want) {
      throw pipeline_error("chunkpipe: " + detail::quoted(s.path) + " changed size while being read: it ended at byte " +
                           std::to_string(s.base + rel + got) + ", inside the range of bytes " +
                           std::to_string(s.base) + " to " + std::to_string(s.base + s.limit) + " it held when opened");
    }
    return want / sizeof(T);
  }

  std::shared_ptr<FileReaderState> state_;
};

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
