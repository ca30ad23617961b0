// SPDX-License-Identifier: MIT
// File sources and sinks, and generators, on the host backend: files of
// random floats through a Map into files, ragged and exact and empty;
// every staging mode; errors at construction (missing, unreadable, wrong
// size, no directory) and during a run (a read error, a pipe that ends
// mid-element, a full device, a file size limit, a throwing source or
// sink), after which no partial output exists under the final name and the
// same pipeline runs correctly again.
#include <chunkpipe/files.hpp>
#include <chunkpipe/host_backend.hpp>
#include <chunkpipe/shard.hpp>
#include <chunkpipe/simulate.hpp>
#include <chunkpipe/storage.hpp>

#include "catch.hpp"
#include "scratch_dir.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace chunkpipe;
namespace fs = std::filesystem;

namespace {

struct Fma {
  float a, b;
  CHUNKPIPE_HOST_DEVICE float operator()(float x) const { return std::fma(x, a, b); }
};

const Fma kFma{1.5f, -0.25f};

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-100.f, 100.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<float> reference(const std::vector<float>& x) {
  std::vector<float> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = kFma(x[i]);
  return y;
}

// A directory of its own per test case, removed with everything in it.
struct Scratch : test_support::ScratchDir {
  Scratch() : ScratchDir("chunkpipe_files_test") {}
};

void write_bytes(const std::string& path, const void* data, std::size_t bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  if (!f) throw std::runtime_error("could not write test file " + path);
}

template <class T>
void write_file(const std::string& path, const std::vector<T>& v) {
  write_bytes(path, v.data(), v.size() * sizeof(T));
}

std::vector<float> read_floats(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (bytes.size() % sizeof(float) != 0) throw std::runtime_error(path + " is not a whole number of floats");
  std::vector<float> v(bytes.size() / sizeof(float));
  if (!v.empty()) std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

bool exists(const std::string& path) {
  struct ::stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

// Element-wise equality; NaN never compares equal, so a poisoned or
// unwritten element always fails.
bool same(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return false;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!(got[i] == want[i])) return false;
  }
  return true;
}

// The message of the pipeline_error `f` throws; fails the test if it
// throws nothing.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const pipeline_error& e) {
    return e.what();
  }
  FAIL("expected a chunkpipe::pipeline_error");
  return {};
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Root reads and writes whatever the mode bits say. To see EACCES, the
// checks that need it run with the effective user set to nobody, and back
// to root afterwards (the real user stays root, so that is allowed).
class Unprivileged {
 public:
  Unprivileged() {
    if (::geteuid() != 0) {
      applies_ = true;
    } else if (::seteuid(65534) == 0) {
      applies_ = restore_ = true;
    }
  }
  ~Unprivileged() {
    if (restore_) (void)::seteuid(0);
  }
  Unprivileged(const Unprivileged&) = delete;
  Unprivileged& operator=(const Unprivileged&) = delete;
  /// Mode bits apply to this process now.
  bool applies() const { return applies_; }

 private:
  bool applies_ = false, restore_ = false;
};

// Files may grow only to `bytes` while it lives: writes past it fail with
// EFBIG, a real write failure on any file system. SIGXFSZ, which would kill
// the process instead, is ignored meanwhile.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &old_);
    previous_ = ::signal(SIGXFSZ, SIG_IGN);
    rlimit lower = old_;
    lower.rlim_cur = bytes;
    ok_ = ::setrlimit(RLIMIT_FSIZE, &lower) == 0;
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    ::signal(SIGXFSZ, previous_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;
  bool ok() const { return ok_; }

 private:
  rlimit old_{};
  void (*previous_)(int) = SIG_DFL;
  bool ok_ = false;
};

// A source that fails at chunk 3, after three good chunks.
struct FailingSource {
  std::size_t operator()(std::size_t chunk, ::cuda::std::span<float> slot) const {
    if (chunk == 3) throw std::runtime_error("source failed at chunk 3");
    for (std::size_t i = 0; i < slot.size(); ++i) slot[i] = static_cast<float>(chunk * slot.size() + i);
    return slot.size();
  }
};

// A sink that forwards to a file sink and fails at chunk 2: the file sink's
// abort() must still remove its temporary.
struct FailingSink {
  Sink<float, detail::FileWriter<float>> file;
  void operator()(std::size_t chunk, std::size_t offset, ::cuda::std::span<const float> data) {
    if (chunk == 2) throw std::runtime_error("sink failed at chunk 2");
    file.fn(chunk, offset, data);
  }
  void finish() { file.fn.finish(); }
  void abort() { file.fn.abort(); }
};

const Policy all_policies[] = {Policy::serial, Policy::slot_streams, Policy::stage_streams, Policy::automatic};

}  // namespace

TEST_CASE("a file of random floats through a Map into a file", "[files]") {
  Scratch dir;
  const std::string in = dir / "in.f32", out = dir / "out.f32";
  // 1000 = 15 chunks of 64 and a short final chunk of 40; 640 ends exactly
  // on a chunk boundary, so the source is called once more and returns 0.
  for (std::size_t n : {std::size_t{1000}, std::size_t{640}, std::size_t{1}}) {
    const std::vector<float> x = random_floats(n, static_cast<unsigned>(n));
    const std::vector<float> want = reference(x);
    write_file(in, x);
    for (Policy policy : all_policies) {
      for (int depth : {1, 3}) {
        for (std::uint64_t seed : {0u, 5u}) {
          HostPipeline<Map<Fma>> pipe({.chunk_elems = 64, .depth = depth, .policy = policy}, Map<Fma>{kFma});
          pipe.set_seed(seed);
          fs::remove(out);  // so a run that writes nothing cannot pass on the last one's file
          pipe.run(file_source<float>(in), file_sink<float>(out));
          INFO(to_string(policy) << " depth " << depth << " n " << n << " seed " << seed);
          REQUIRE(same(read_floats(out), want));
          REQUIRE(!exists(out + ".partial"));
          REQUIRE(pipe.last_run().chunks == (n + 63) / 64);
        }
      }
    }
  }
}

TEST_CASE("a regular file is read and written in parts of each chunk, where they lie", "[files][positional]") {
  // Chunks of 2^19 floats (2 MiB) are cut into parts (the host backend cuts
  // them as a team of three would, and runs the parts in turn); sizes that
  // end inside a part, on a part's edge, on a chunk's edge and in the first
  // part of a chunk.
  Scratch dir;
  const std::string in = dir / "in.f32", out = dir / "out.f32";
  const std::size_t chunk = std::size_t{1} << 19;
  for (std::size_t n : {chunk * 3 + 12345, chunk * 2, chunk + (std::size_t{1} << 14), chunk * 2 + 174763}) {
    const std::vector<float> x = random_floats(n, static_cast<unsigned>(n));
    const std::vector<float> want = reference(x);
    write_file(in, x);
    for (std::uint64_t seed : {0u, 7u}) {
      HostPipeline<Map<Fma>> pipe({.chunk_elems = chunk, .depth = 3}, Map<Fma>{kFma});
      pipe.set_seed(seed);
      fs::remove(out);
      pipe.run(file_source<float>(in), file_sink<float>(out));
      INFO("n " << n << " seed " << seed);
      REQUIRE(same(read_floats(out), want));
      REQUIRE(pipe.last_run().elems == n);
      // Into a range: nothing past the end is written.
      std::vector<float> y(n + 7, std::numeric_limits<float>::quiet_NaN());
      pipe.run(file_source<float>(in), y);
      REQUIRE(same(std::vector<float>(y.begin(), y.begin() + static_cast<std::ptrdiff_t>(n)), want));
      REQUIRE(std::isnan(y[n]));
    }
  }
}

TEST_CASE("a file not in the page cache is read with O_DIRECT where the file system allows, a cached one is not",
          "[files][positional][direct]") {
  // 64 MiB and 12345 floats more: whole 2 MiB chunks read directly in
  // parts, and a last chunk that ends off 4 KiB.
  Scratch dir;
  const std::string in = dir / "cold.f32";
  const std::size_t n = (std::size_t{64} << 20) / sizeof(float) + 12345;
  const std::vector<float> x = random_floats(n, 77);
  const std::vector<float> want = reference(x);
  write_file(in, x);
  {
    // Out of the page cache: written back, then dropped.
    const int fd = ::open(in.c_str(), O_RDONLY);
    REQUIRE(fd >= 0);
    REQUIRE(::fsync(fd) == 0);
    REQUIRE(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0);
    ::close(fd);
  }
  const int probe = ::open(in.c_str(), O_RDONLY | O_DIRECT);
  const bool fs_takes_direct = probe >= 0;
  if (probe >= 0) ::close(probe);
  HostPipeline<Map<Fma>> pipe({.chunk_elems = std::size_t{1} << 19, .depth = 3}, Map<Fma>{kFma});
  std::vector<float> y(n + 3, std::numeric_limits<float>::quiet_NaN());
  auto cold = file_source<float>(in);
  if (!fs_takes_direct) {
    WARN("this file system refuses O_DIRECT: only the buffered fallback is checked");
    REQUIRE_FALSE(cold.fn.direct_io());
  } else {
    REQUIRE(cold.fn.direct_io());
  }
  pipe.run(cold, y);
  REQUIRE(same(std::vector<float>(y.begin(), y.begin() + static_cast<std::ptrdiff_t>(n)), want));
  REQUIRE(std::isnan(y[n]));
  if (fs_takes_direct) {
    // All of it directly: a slot's parts are on 4 KiB, and the last one's
    // direct read comes back short where the file ends, not on 4 KiB.
    CHECK(cold.fn.direct_bytes() == n * sizeof(float));
  }
  // A window off 4 KiB (1000 floats): no read is on 4 KiB, all go through
  // the page cache, and the output is the same.
  {
    HostPipeline<Map<Fma>> odd({.chunk_elems = 1000, .depth = 3}, Map<Fma>{kFma});
    auto src = file_source<float>(in);
    std::fill(y.begin(), y.end(), std::numeric_limits<float>::quiet_NaN());
    odd.run(src, y);
    REQUIRE(same(std::vector<float>(y.begin(), y.begin() + static_cast<std::ptrdiff_t>(n)), want));
    CHECK(src.fn.direct_io() == fs_takes_direct);
    CHECK(src.fn.direct_bytes() == 0);
  }
  // Read through the page cache once, the file is cached: a new handle
  // reads it from there.
  REQUIRE(same(read_floats(in), x));
  auto warm = file_source<float>(in);
  CHECK_FALSE(warm.fn.direct_io());
  std::fill(y.begin(), y.end(), std::numeric_limits<float>::quiet_NaN());
  pipe.run(warm, y);
  REQUIRE(same(std::vector<float>(y.begin(), y.begin() + static_cast<std::ptrdiff_t>(n)), want));
  CHECK(warm.fn.direct_bytes() == 0);
}

TEST_CASE("measure_storage gives a directory's read and write rates and leaves nothing behind", "[files][storage]") {
  Scratch dir;
  const StorageRates r = measure_storage(dir.path().string(), std::size_t{16} << 20, 2);
  CHECK(r.write_gbps > 0.0);
  CHECK(r.read_gbps > 0.0);
  CHECK(r.uncached_read_gbps > 0.0);
  CHECK(fs::is_empty(dir.path()));
  // What it is for: a prediction of a file run.
  Machine m = machines::h200_pcie5();
  m.storage_read_gbps = r.read_gbps;
  m.storage_write_gbps = r.write_gbps;
  Workload w = map_workload(std::size_t{64} << 20, std::size_t{2} << 20, 1.0);
  w.in_from_storage = w.out_to_storage = true;
  PlanShape shape;
  shape.stage_in = shape.stage_out = true;
  const Report p = simulate(make_plan(Policy::stage_streams, 3, shape, 32), w, m);
  CHECK(makespan_ms(p) >= 256.0 / r.write_gbps);  // 256 MB written, at least
  CHECK_THROWS_AS(measure_storage(dir.path().string(), 0, 2), config_error);
  CHECK_THROWS_AS(measure_storage((dir.path() / "missing").string(), 1 << 20, 1), pipeline_error);
}

TEST_CASE("an empty file gives an empty output file and writes nothing to a range", "[files]") {
  Scratch dir;
  const std::string in = dir / "empty.f32", out = dir / "out.f32";
  write_bytes(in, "", 0);
  HostPipeline<Map<Fma>> pipe({.chunk_elems = 64, .depth = 2}, Map<Fma>{kFma});
  pipe.run(file_source<float>(in), file_sink<float>(out));
  REQUIRE(exists(out));
  REQUIRE(fs::file_size(out) == 0);
  REQUIRE(!exists(out + ".partial"));
  REQUIRE(pipe.last_run().chunks == 0);

  std::vector<float> y(10, std::numeric_limits<float>::quiet_NaN());
  pipe.run(file_source<float>(in), y);
  for (float v : y) REQUIRE(std::isnan(v));
}

TEST_CASE("one file source and sink per run; a source reads its file again in each run", "[files]") {
  Scratch dir;
  const std::string in = dir / "in.f32", out = dir / "out.f32";
  const std::vector<float> x = random_floats(300, 11);
  write_file(in, x);
  HostPipeline<Map<Fma>> pipe({.chunk_elems = 64, .depth = 2}, Map<Fma>{kFma});
  const auto src = file_source<float>(in);
  for (int run = 0; run < 2; ++run) {
    std::vector<float> y(x.size(), std::numeric_limits<float>::quiet_NaN());
    pipe.run(src, y);
    INFO("run " << run);
    REQUIRE(same(y, reference(x)));
  }

  // A sink writes one run; the second is refused, and the file it made stays.
  const auto snk = file_sink<float>(out);
  pipe.run(src, snk);
  REQUIRE(same(read_floats(out), reference(x)));
  REQUIRE_THROWS_AS(pipe.run(src, snk), pipeline_error);
  REQUIRE(same(read_floats(out), reference(x)));

  // A sink dropped before any run takes its temporary with it.
  {
    const auto unused = file_sink<float>(dir / "unused.f32");
    REQUIRE(exists(dir / "unused.f32.partial"));
  }
  REQUIRE(!exists(dir / "unused.f32.partial"));
  REQUIRE(!exists(dir / "unused.f32"));
}

TEST_CASE("every staging mode with a file on one side and a range on the other", "[files][staging]") {
  Scratch dir;
  const std::string in = dir / "in.f32", out = dir / "out.f32";
  const std::vector<float> x = random_floats(777, 3);
  const std::vector<float> want = reference(x);
  write_file(in, x);
  for (Staging mode : {Staging::automatic, Staging::threads, Staging::registered, Staging::direct}) {
    INFO("staging mode " << static_cast<int>(mode));
    HostPipeline<Map<Fma>> pipe({.chunk_elems = 64, .depth = 3, .staging = mode, .host_threads = 2},
                                Map<Fma>{kFma});
    // A file into a range: the range is staged or not as the mode says.
    std::vector<float> y(x.size(), std::numeric_limits<float>::quiet_NaN());
    pipe.run(file_source<float>(in), y);
    REQUIRE(same(y, want));
    // A range into a file, and the same with the range marked pinned.
    fs::remove(out);
    pipe.run(x, file_sink<float>(out));
    REQUIRE(same(read_floats(out), want));
    fs::remove(out);
    pipe.run(pinned(x), file_sink<float>(out));
    REQUIRE(same(read_floats(out), want));
    REQUIRE(!exists(out + ".partial"));
  }
}

TEST_CASE("a generator of unknown length into a range and into a file", "[files][generate]") {
  Scratch dir;
  auto value = [](std::size_t i) { return static_cast<float>(i % 997) * 0.125f - 40.f; };
  for (std::size_t n : {std::size_t{1000}, std::size_t{640}, std::size_t{0}}) {
    for (Policy policy : all_policies) {
      HostPipeline<Map<Fma>> pipe({.chunk_elems = 64, .depth = 3, .policy = policy}, Map<Fma>{kFma});
      pipe.set_seed(n + 1);
      std::vector<float> y(1200, std::numeric_limits<float>::quiet_NaN());
      pipe.run(generate<float>(n, value), y);
      INFO(to_string(policy) << " n " << n);
      REQUIRE(pipe.last_run().chunks == (n + 63) / 64);
      for (std::size_t i = 0; i < n; ++i) REQUIRE(y[i] == kFma(value(i)));
      for (std::size_t i = n; i < y.size(); ++i) REQUIRE(std::isnan(y[i]));

      fs::remove(dir / "gen.f32");
      pipe.run(generate<float>(n, value), file_sink<float>(dir / "gen.f32"));
      REQUIRE(exists(dir / "gen.f32"));
      const std::vector<float> got = read_floats(dir / "gen.f32");
      REQUIRE(got.size() == n);
      for (std::size_t i = 0; i < n; ++i) REQUIRE(got[i] == kFma(value(i)));
    }
  }
  // A generator must end; a stateful one starts afresh in every run.
  REQUIRE_THROWS_AS(generate<float>(unknown_length, value), config_error);
  HostPipeline<Map<Fma>> pipe({.chunk_elems = 16}, Map<Fma>{{1.f, 0.f}});
  const auto counting = generate<float>(50, [k = 0.f](std::size_t) mutable { return k++; });
  for (int run = 0; run < 2; ++run) {
    std::vector<float> y(50);
    pipe.run(counting, y);
    for (std::size_t i = 0; i < y.size(); ++i) REQUIRE(y[i] == static_cast<float>(i));
  }
}

TEST_CASE("file_source refuses what it cannot read before anything is queued", "[files][errors]") {
  Scratch dir;
  SECTION("a missing file") {
    const std::string path = dir / "missing.f32";
    const std::string what = error_of([&] { (void)file_source<float>(path); });
    INFO(what);
    REQUIRE(contains(what, path));
    REQUIRE(contains(what, std::strerror(ENOENT)));
  }
  SECTION("a directory") {
    const std::string what = error_of([&] { (void)file_source<float>(dir.path().string()); });
    INFO(what);
    REQUIRE(contains(what, dir.path().string()));
    REQUIRE(contains(what, std::strerror(EISDIR)));
  }
  SECTION("a file without read permission") {
    const std::string path = dir / "secret.f32";
    write_file(path, random_floats(16, 1));
    fs::permissions(path, fs::perms::none);
    fs::permissions(dir.path(), fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                   fs::perms::others_read | fs::perms::others_exec);
    Unprivileged nobody;
    INFO("mode bits apply to this process: " << nobody.applies());
    if (nobody.applies()) {
      const std::string what = error_of([&] { (void)file_source<float>(path); });
      INFO(what);
      REQUIRE(contains(what, path));
      REQUIRE(contains(what, std::strerror(EACCES)));
    }
  }
  SECTION("a size that is not a whole number of elements") {
    const std::string path = dir / "odd.f32";
    std::vector<unsigned char> bytes(4001, 0x3f);
    write_file(path, bytes);
    const std::string what = error_of([&] { (void)file_source<float>(path); });
    INFO(what);
    REQUIRE(contains(what, path));
    REQUIRE(contains(what, "4001"));
    // The element type decides: 4004 bytes are 1001 floats but 500.5 doubles.
    bytes.resize(4004);
    write_file(path, bytes);
    (void)file_source<float>(path);
    const std::string as_double = error_of([&] { (void)file_source<double>(path); });
    INFO(as_double);
    REQUIRE(contains(as_double, "4004"));
  }
}

TEST_CASE("read errors during a run reach the caller with the offset", "[files][errors]") {
  Scratch dir;
  const std::string out = dir / "out.f32";
  HostPipeline<Map<Fma>> pipe({.chunk_elems = 64, .depth = 2}, Map<Fma>{kFma});

  SECTION("a read that fails (EIO)") {
    // /proc/self/mem is a regular file whose reads at address 0 fail with EIO.
    const std::string what = error_of([&] { pipe.run(file_source<float>("/proc/self/mem"), file_sink<float>(out)); });
    INFO(what);
    REQUIRE(contains(what, "/proc/self/mem"));
    REQUIRE(contains(what, "offset 0"));
    REQUIRE(contains(what, std::strerror(EIO)));
  }

  SECTION("a pipe, whose size is known only at its end") {
    const std::string fifo = dir / "pipe.f32";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    const std::vector<float> x = random_floats(1000, 21);
    // Fewer bytes than a pipe buffer holds, so the writer never waits for
    // the reader, and the reader sees short reads as the data arrives. The
    // writer is joined however the test leaves the block.
    struct Writer {
      std::thread thread;
      ~Writer() {
        if (thread.joinable()) thread.join();
      }
    };
    auto feed = [&](std::size_t bytes) {
      return std::thread([&fifo, &x, bytes] {
        const int fd = ::open(fifo.c_str(), O_WRONLY);
        if (fd < 0) return;
        std::vector<unsigned char> data(bytes, 0);
        std::memcpy(data.data(), x.data(), std::min(bytes, x.size() * sizeof(float)));
        std::size_t done = 0;
        while (done < bytes) {
          const ::ssize_t r = ::write(fd, data.data() + done, std::min<std::size_t>(bytes - done, 1000));
          if (r <= 0) break;
          done += static_cast<std::size_t>(r);
        }
        ::close(fd);
      });
    };
    {
      Writer writer{feed(x.size() * sizeof(float))};
      auto src = file_source<float>(fifo);  // blocks until the writer opens
      pipe.run(src, file_sink<float>(out));
      writer.thread.join();
      REQUIRE(same(read_floats(out), reference(x)));
      // A pipe feeds one run.
      std::vector<float> y(x.size());
      REQUIRE_THROWS_AS(pipe.run(src, y), pipeline_error);
    }
    {
      Writer writer{feed(x.size() * sizeof(float) + 2)};
      auto src = file_source<float>(fifo);
      const std::string what = error_of([&] { pipe.run(src, file_sink<float>(out)); });
      writer.thread.join();
      INFO(what);
      REQUIRE(contains(what, fifo));
      REQUIRE(contains(what, "4002"));
      // The failed run removed its temporary and left the earlier output alone.
      REQUIRE(!exists(out + ".partial"));
      REQUIRE(same(read_floats(out), reference(x)));
    }
  }

  SECTION("a file that grows while being read") {
    const std::string in = dir / "growing.f32";
    write_file(in, random_floats(100, 2));
    auto src = file_source<float>(in);
    write_file(in, random_floats(200, 2));
    std::vector<float> y(300);
    const std::string what = error_of([&] { pipe.run(src, y); });
    INFO(what);
    REQUIRE(contains(what, in));
    REQUIRE(contains(what, "changed size"));
  }

  SECTION("a file that shrinks while being read") {
    // 300 floats when opened, 100 (400 bytes) when read: chunk 1 (bytes 256
    // to 511) comes up short at byte 400, and no output is left behind.
    const std::string in = dir / "shrinking.f32";
    write_file(in, random_floats(300, 3));
    auto src = file_source<float>(in);
    fs::resize_file(in, 100 * sizeof(float));
    const std::string what = error_of([&] { pipe.run(src, file_sink<float>(out)); });
    INFO(what);
    REQUIRE(contains(what, in));
    REQUIRE(contains(what, "changed size"));
    REQUIRE(contains(what, "byte 400"));
    REQUIRE(!exists(out));
    REQUIRE(!exists(out + ".partial"));
  }

  SECTION("reads interrupted by signals (EINTR) go on") {
    // The host backend reads on the thread that runs the pipeline, this
    // one. A writer feeds a pipe in pieces with pauses, so that the reader
    // waits in read(); meanwhile this thread gets SIGUSR1 every 0.5 ms from
    // a handler installed without SA_RESTART, so each wait ends in EINTR.
    // A reader that did not retry would fail the run.
    const std::string fifo = dir / "slow.f32";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    const std::vector<float> x = random_floats(4000, 23);
    static std::atomic<int> caught{0};
    struct sigaction act {}, old {};
    act.sa_handler = [](int) { caught.fetch_add(1, std::memory_order_relaxed); };
    sigemptyset(&act.sa_mask);
    act.sa_flags = 0;  // no SA_RESTART: a blocked read() returns EINTR
    REQUIRE(::sigaction(SIGUSR1, &act, &old) == 0);
    std::atomic<bool> done{false};
    const pthread_t reader = ::pthread_self();
    std::thread writer([&] {
      const int fd = ::open(fifo.c_str(), O_WRONLY);
      if (fd < 0) return;
      const auto* bytes = reinterpret_cast<const unsigned char*>(x.data());
      const std::size_t total = x.size() * sizeof(float), piece = total / 8;
      for (std::size_t at = 0; at < total; at += piece) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        if (::write(fd, bytes + at, std::min(piece, total - at)) <= 0) break;
      }
      ::close(fd);
    });
    std::thread signaller([&] {
      while (!done.load()) {
        ::pthread_kill(reader, SIGUSR1);
        std::this_thread::sleep_for(std::chrono::microseconds(500));
      }
    });
    caught = 0;
    std::string failure;
    std::vector<float> y(x.size(), std::numeric_limits<float>::quiet_NaN());
    try {
      pipe.run(file_source<float>(fifo), y);
    } catch (const std::exception& e) {
      failure = e.what();
    }
    done = true;
    signaller.join();
    writer.join();
    ::sigaction(SIGUSR1, &old, nullptr);
    INFO(failure);
    REQUIRE(failure.empty());
    REQUIRE(caught.load() > 10);
    REQUIRE(same(y, reference(x)));
  }

  // And then the pipeline works.
  const std::vector<float> x = random_floats(200, 9);
  write_file(dir / "fine.f32", x);
  pipe.run(file_source<float>(dir / "fine.f32"), file_sink<float>(out));
  REQUIRE(same(read_floats(out), reference(x)));
}

TEST_CASE("file_sink refuses what it cannot create before anything is queued", "[files][errors]") {
  Scratch dir;
  SECTION("a directory that does not exist") {
    const std::string path = dir / "no/such/dir/out.f32";
    const std::string what = error_of([&] { (void)file_sink<float>(path); });
    INFO(what);
    REQUIRE(contains(what, path));
    REQUIRE(contains(what, std::strerror(ENOENT)));
  }
  SECTION("a device, unless written in place") {
    // The temporary could not be renamed onto it (and must never replace it).
    const std::string what = error_of([&] { (void)file_sink<float>("/dev/null"); });
    INFO(what);
    REQUIRE(contains(what, "/dev/null"));
    REQUIRE(contains(what, "temporary = false"));
    REQUIRE(!exists("/dev/null.partial"));
    struct ::stat st {};
    REQUIRE(::stat("/dev/null", &st) == 0);
    REQUIRE(S_ISCHR(st.st_mode));
    HostPipeline<Map<Fma>> pipe({.chunk_elems = 64}, Map<Fma>{kFma});
    pipe.run(random_floats(300, 4), file_sink<float>("/dev/null", {.temporary = false}));
  }
  SECTION("a target that is a directory") {
    const std::string what = error_of([&] { (void)file_sink<float>(dir.path().string()); });
    INFO(what);
    REQUIRE(contains(what, std::strerror(EISDIR)));
    REQUIRE(fs::is_directory(dir.path()));
  }
  SECTION("a directory without write permission") {
    const fs::path locked = dir.path() / "locked";
    fs::create_directory(locked);
    const auto rx = fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read | fs::perms::group_exec |
                    fs::perms::others_read | fs::perms::others_exec;
    fs::permissions(locked, rx);
    fs::permissions(dir.path(), rx | fs::perms::owner_write);
    const std::string path = (locked / "out.f32").string();
    {
      Unprivileged nobody;
      INFO("mode bits apply to this process: " << nobody.applies());
      if (nobody.applies()) {
        const std::string what = error_of([&] { (void)file_sink<float>(path); });
        INFO(what);
        REQUIRE(contains(what, path));
        REQUIRE(contains(what, std::strerror(EACCES)));
      }
    }
    REQUIRE(!exists(path + ".partial"));
    fs::permissions(locked, fs::perms::owner_all);  // so the scratch directory can be removed
  }
}

TEST_CASE("write failures during a run: no output under the final name, and the pipeline runs again",
          "[files][errors]") {
  Scratch dir;
  const std::string in = dir / "in.f32", out = dir / "out.f32";
  const std::vector<float> x = random_floats(1000, 31);
  write_file(in, x);
  HostPipeline<Map<Fma>> pipe({.chunk_elems = 64, .depth = 3}, Map<Fma>{kFma});

  SECTION("a full device, written in place") {
    // /dev/full fails every write with ENOSPC. It cannot take a temporary
    // next to it, so this sink writes in place.
    const std::string what =
        error_of([&] { pipe.run(file_source<float>(in), file_sink<float>("/dev/full", {.temporary = false})); });
    INFO(what);
    REQUIRE(contains(what, "/dev/full"));
    REQUIRE(contains(what, "offset 0"));
    REQUIRE(contains(what, std::strerror(ENOSPC)));
  }

  SECTION("a file size limit hit in the middle of the file") {
    write_file(out, std::vector<float>{1.f, 2.f, 3.f});  // an earlier result, which must survive
    std::string what;
    {
      // 3000 bytes: the 12th chunk of 256 bytes is cut short, then refused.
      FileSizeLimit limit(3000);
      REQUIRE(limit.ok());
      what = error_of([&] { pipe.run(file_source<float>(in), file_sink<float>(out)); });
    }
    INFO(what);
    REQUIRE(contains(what, out));
    REQUIRE(contains(what, std::strerror(EFBIG)));
    REQUIRE(contains(what, "offset 3000"));
    REQUIRE(!exists(out + ".partial"));
    REQUIRE(same(read_floats(out), std::vector<float>{1.f, 2.f, 3.f}));
  }

  SECTION("a source that throws") {
    try {
      pipe.run(source<float>(FailingSource{}), file_sink<float>(out));
      FAIL("expected the source's error");
    } catch (const std::runtime_error& e) {
      REQUIRE(std::string(e.what()) == "source failed at chunk 3");
    }
    REQUIRE(!exists(out + ".partial"));
    REQUIRE(!exists(out));
  }

  SECTION("a sink that throws") {
    try {
      pipe.run(file_source<float>(in), sink<float>(FailingSink{file_sink<float>(out)}));
      FAIL("expected the sink's error");
    } catch (const std::runtime_error& e) {
      REQUIRE(std::string(e.what()) == "sink failed at chunk 2");
    }
    REQUIRE(!exists(out + ".partial"));
    REQUIRE(!exists(out));
  }

  // Whatever failed, the same pipeline then converts the file correctly.
  pipe.run(file_source<float>(in), file_sink<float>(out));
  REQUIRE(same(read_floats(out), reference(x)));
  REQUIRE(!exists(out + ".partial"));
}

TEST_CASE("shards of one file, each through its own pipeline into its range of one file, equal one run",
          "[files][shard]") {
  Scratch dir;
  const std::string in = dir / "in.f32", whole = dir / "whole.f32", parts = dir / "parts.f32";
  const std::size_t n = 1000;
  const std::vector<float> x = random_floats(n, 77);
  write_file(in, x);
  {
    HostPipeline<Map<Fma>> pipe({.chunk_elems = 64}, Map<Fma>{kFma});
    pipe.run(file_source<float>(in), file_sink<float>(whole));
  }
  for (int size : {1, 2, 3, 7}) {
    fs::remove(parts);
    std::size_t covered = 0;
    // Last rank first: the file is created by whichever writes first.
    for (int rank = size - 1; rank >= 0; --rank) {
      const Shard mine = shard(n, rank, size, 16);  // whole multiples of 16 but the last
      INFO("size " << size << " rank " << rank);
      if (rank + 1 < size) CHECK(mine.count % 16 == 0);
      CHECK(mine.first % 16 == 0);
      covered += mine.count;
      HostPipeline<Map<Fma>> pipe({.chunk_elems = 64}, Map<Fma>{kFma});
      pipe.run(file_source<float>(in, {mine.first, mine.count}),
               file_sink<float>(parts, {.temporary = false, .sync = false, .first = mine.first, .shared = true}));
      REQUIRE(pipe.last_run().elems == mine.count);
    }
    CHECK(covered == n);
    INFO("size " << size);
    REQUIRE(same(read_floats(parts), read_floats(whole)));
  }
}

TEST_CASE("shard splits a range into contiguous shares in rank order, and refuses nonsense", "[shard][errors]") {
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{10}, std::size_t{1000}, std::size_t{1001}}) {
    for (int size : {1, 2, 3, 8, 13}) {
      for (std::size_t multiple : {std::size_t{1}, std::size_t{4}, std::size_t{16384}}) {
        std::size_t next = 0, most = 0, least = n;
        for (int rank = 0; rank < size; ++rank) {
          const Shard s = shard(n, rank, size, multiple);
          INFO("n " << n << " size " << size << " multiple " << multiple << " rank " << rank);
          REQUIRE(s.first == next);  // contiguous, in rank order
          REQUIRE((s.first % multiple == 0 || s.first == n));
          next += s.count;
          most = std::max(most, s.count);
          least = std::min(least, s.count);
        }
        CHECK(next == n);  // covers [0, n) exactly once
        CHECK(most - least <= multiple);
      }
    }
  }
  CHECK_THROWS_AS(shard(10, 0, 0), config_error);
  CHECK_THROWS_AS(shard(10, 2, 2), config_error);
  CHECK_THROWS_AS(shard(10, -1, 2), config_error);
  CHECK_THROWS_AS(shard(10, 0, 2, 0), config_error);
  CHECK_THROWS_AS(shard(unknown_length, 0, 2), config_error);
  // Near the top of size_t: no overflow on the way.
  const std::size_t big = std::numeric_limits<std::size_t>::max() - 1;
  CHECK(shard(big, 0, 1, std::size_t{1} << 20).count == big);
  CHECK(shard(big, 1, 2, std::size_t{1} << 20).first + shard(big, 1, 2, std::size_t{1} << 20).count == big);
}

TEST_CASE("a file range is checked against the file, and a shared sink must write in place", "[files][shard][errors]") {
  Scratch dir;
  const std::string in = dir / "in.f32";
  write_file(in, random_floats(100, 3));
  CHECK(contains(error_of([&] { (void)file_source<float>(in, {90, 20}); }), "not the range"));
  CHECK(contains(error_of([&] { (void)file_source<float>(in, {101, unknown_length}); }), "not the range"));
  CHECK_NOTHROW(file_source<float>(in, {100, 0}));
  CHECK_NOTHROW(file_source<float>(in, {40, unknown_length}));
  CHECK(contains(error_of([&] { (void)file_sink<float>(dir / "out.f32", {.shared = true}); }), "temporary"));
  // A share of a file that would be truncated under the other shares.
  CHECK(contains(error_of([&] { (void)file_sink<float>(dir / "out.f32", {.temporary = false, .first = 8}); }),
                 "needs shared"));
  // A range to the end reads just that.
  HostPipeline<Map<Fma>> pipe({.chunk_elems = 16}, Map<Fma>{kFma});
  std::vector<float> y(60, std::numeric_limits<float>::quiet_NaN());
  pipe.run(file_source<float>(in, {40, unknown_length}), y);
  const std::vector<float> x = random_floats(100, 3);
  for (std::size_t i = 0; i < 60; ++i) REQUIRE(y[i] == kFma(x[40 + i]));
}
