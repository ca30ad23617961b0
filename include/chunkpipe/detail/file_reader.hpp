// SPDX-License-Identifier: MIT
// FileReader, the Source functor behind file_source (files.hpp), and what
// its copies share. Kept out of files.hpp so that the public header reads as
// the API; this is how a chunk is read: pread at its own offset by several
// threads, or read in order from a pipe, O_DIRECT where the file was not in
// the page cache, and every way the file may change under a run caught.
// It also holds the POSIX pieces that the writer (detail/file_writer.hpp)
// and measure_storage (storage.hpp) use too: Descriptor, open_retrying,
// quoted, errno_text, max_io_bytes. Host-only, POSIX; no CUDA.
#pragma once

#include <chunkpipe/errors.hpp>

#include <cuda/std/span>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

namespace chunkpipe::detail {

// --- POSIX pieces the writer and storage.hpp use too ---

/// Bytes moved per system call at most: Linux moves at most 2 GiB - 4 KiB
/// per read or write anyway, and a bound keeps the loops portable.
inline constexpr std::size_t max_io_bytes = std::size_t{1} << 30;

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

// --- The reader ---

/// What O_DIRECT reads are aligned to (address, offset and length): the
/// page size, which covers the logical block size of any disk.
inline constexpr std::size_t direct_io_align = 4096;

/// Files smaller than this are never read with O_DIRECT: the sample below
/// is too coarse for them, and they are read in a blink either way.
inline constexpr std::uint64_t direct_io_min_bytes = std::uint64_t{64} << 20;

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

}  // namespace chunkpipe::detail
