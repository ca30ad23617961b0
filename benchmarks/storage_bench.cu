// SPDX-License-Identifier: MIT
//
// storage_bench: a file larger than it need be, streamed through the GPU,
// against what the machine's storage gives and a hand-written loop, in one
// process. For each size (default 4 GiB of float):
//
//   machine  the storage's own rates: 1 to 16 threads of 8 MiB preads into
//            pinned memory (cached: the file in the page cache; uncached:
//            dropped with posix_fadvise(POSIX_FADV_DONTNEED) before each
//            pass, and O_DIRECT), and 1 to 16 threads of pwrite, with and
//            without the fsync at the end.
//   pinned   the same pipeline (Options{}, a Map of 8 FMAs) over pinned
//            memory in and out: what the link and the GPU allow.
//   files    file_source -> Map -> a Sink that checks and discards;
//            file_source -> Map -> file_sink (a .partial, fsync, rename),
//            and with temporary = false.
//   hand     a hand-written loop: pread into one of two pinned buffers,
//            cudaMemcpyAsync, kernel, copy back, pwrite, on two streams
//            (the double buffer most programs write), to discard and to a
//            file (fsync at the end).
//
// Outputs are checked against the closed form (every 1021st element, and
// every element of the first 1 Mi), output files after each run. Times are
// wall clock around whole runs (a file run's cost is the host's as much as
// the GPU's); each figure is the median of --rounds passes. Ratios: a file
// run against min(the 8-thread cached read rate, the pinned pipeline), a
// file->file run against the best write-plus-fsync rate, and each against
// the hand loop. Prints tables; writes CSV.
#include <chunkpipe/files.hpp>
#include <chunkpipe/pipeline.cuh>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kBlock = 8 * kMiB;  // the machine rows' read and write size

struct Fma8 {
  CHUNKPIPE_HOST_DEVICE float operator()(float x) const {
    for (int k = 0; k < 8; ++k) x = fmaf(x, 0.999f, 0.0625f);
    return x;
  }
};

CHUNKPIPE_HOST_DEVICE inline float value_at(std::size_t i) {
  return static_cast<float>((i * 2654435761u) % 8191u) / 8191.0f - 0.5f;
}

__global__ void fma8_kernel(const float* in, float* out, std::size_t n) {
  const std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  if (i < n) out[i] = Fma8{}(in[i]);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

void fail(const std::string& what) {
  std::fprintf(stderr, "storage_bench: %s\n", what.c_str());
  std::exit(1);
}

int open_or_die(const std::string& path, int flags, mode_t mode = 0644) {
  const int fd = ::open(path.c_str(), flags, mode);
  if (fd < 0) fail("open " + path + ": " + std::strerror(errno));
  return fd;
}

// Runs fn(t) on `threads` threads and waits for them.
void on_threads(int threads, const std::function<void(int)>& fn) {
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) ts.emplace_back(fn, t);
  for (auto& t : ts) t.join();
}

// Writes the input: `bytes` of value_at(i), by 8 threads, then fsync.
void make_input(const std::string& path, std::size_t bytes) {
  const int fd = open_or_die(path, O_WRONLY | O_CREAT | O_TRUNC);
  const std::size_t blocks = (bytes + kBlock - 1) / kBlock;
  on_threads(8, [&](int t) {
    std::vector<float> buf(kBlock / sizeof(float));
    for (std::size_t b = static_cast<std::size_t>(t); b < blocks; b += 8) {
      const std::size_t first = b * kBlock / sizeof(float);
      const std::size_t len = std::min(kBlock, bytes - b * kBlock);
      for (std::size_t i = 0; i < len / sizeof(float); ++i) buf[i] = value_at(first + i);
      if (::pwrite(fd, buf.data(), len, static_cast<off_t>(b * kBlock)) != static_cast<ssize_t>(len)) {
        fail("writing the input failed");
      }
    }
  });
  if (::fsync(fd) != 0) fail("fsync of the input failed");
  ::close(fd);
}

// The file's pages out of the page cache (they are clean: written and synced).
void drop_cache(const std::string& path) {
  const int fd = open_or_die(path, O_RDONLY);
  ::fdatasync(fd);
  if (::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) != 0) fail("posix_fadvise failed");
  ::close(fd);
}

// `threads` threads preading 8 MiB blocks of `path` (round robin) into
// pinned buffers; GB/s. `direct`: O_DIRECT (pinned buffers are page-aligned).
double pread_rate(const std::string& path, std::size_t bytes, int threads, bool direct) {
  const int fd = open_or_die(path, O_RDONLY | (direct ? O_DIRECT : 0));
  std::vector<chunkpipe::PinnedBuffer> bufs;
  for (int t = 0; t < threads; ++t) bufs.emplace_back(kBlock);
  const std::size_t blocks = (bytes + kBlock - 1) / kBlock;
  std::atomic<bool> bad{false};
  const auto t0 = std::chrono::steady_clock::now();
  on_threads(threads, [&](int t) {
    for (std::size_t b = static_cast<std::size_t>(t); b < blocks; b += static_cast<std::size_t>(threads)) {
      const std::size_t len = std::min(kBlock, bytes - b * kBlock);
      if (::pread(fd, bufs[t].data(), direct ? kBlock : len, static_cast<off_t>(b * kBlock)) != static_cast<ssize_t>(len)) {
        bad = true;
      }
    }
  });
  const double s = seconds_since(t0);
  ::close(fd);
  if (bad) fail(std::string("pread ") + (direct ? "(O_DIRECT) " : "") + "of " + path + " came up short");
  return static_cast<double>(bytes) / s / 1e9;
}

// `threads` threads pwriting 8 MiB blocks of a new file of `bytes`; GB/s
// without and with the fsync at the end. With `start_writeback`, each block's
// write-back is started as soon as it is written (sync_file_range), as
// file_sink does, so that fsync has less left to wait for.
std::pair<double, double> pwrite_rate(const std::string& path, std::size_t bytes, int threads,
                                      bool start_writeback = false) {
  const int fd = open_or_die(path, O_WRONLY | O_CREAT | O_TRUNC);
  std::vector<chunkpipe::PinnedBuffer> bufs;
  for (int t = 0; t < threads; ++t) {
    bufs.emplace_back(kBlock);
    std::memset(bufs.back().data(), 0x5A + t, kBlock);
  }
  const std::size_t blocks = (bytes + kBlock - 1) / kBlock;
  const auto t0 = std::chrono::steady_clock::now();
  on_threads(threads, [&](int t) {
    for (std::size_t b = static_cast<std::size_t>(t); b < blocks; b += static_cast<std::size_t>(threads)) {
      const std::size_t len = std::min(kBlock, bytes - b * kBlock);
      if (::pwrite(fd, bufs[t].data(), len, static_cast<off_t>(b * kBlock)) != static_cast<ssize_t>(len)) {
        fail("pwrite came up short");
      }
      if (start_writeback) {
        (void)::sync_file_range(fd, static_cast<off_t>(b * kBlock), static_cast<off_t>(len), SYNC_FILE_RANGE_WRITE);
      }
    }
  });
  const double written = seconds_since(t0);
  if (::fsync(fd) != 0) fail("fsync failed");
  const double synced = seconds_since(t0);
  ::close(fd);
  ::unlink(path.c_str());
  return {static_cast<double>(bytes) / written / 1e9, static_cast<double>(bytes) / synced / 1e9};
}

// Elements wrong among those checked: every 1021st, and all of the first 1 Mi.
// Timed runs check only every 1021st (`all_of_head` false): 2 Ki checks
// per 8 MiB chunk, cheap enough for a Sink on the pipeline's host-out
// thread, where the first 1 Mi would cost 20 to 30 ms of a 140 ms run that
// the pinned pipeline's row does not pay; untimed runs check both.
std::size_t wrong_in(const float* y, std::size_t first, std::size_t n, bool all_of_head = true) {
  std::size_t wrong = 0;
  auto check = [&](std::size_t j) { wrong += y[j] == Fma8{}(value_at(first + j)) ? 0 : 1; };
  const std::size_t head = all_of_head ? std::size_t{1} << 20 : 0;
  const std::size_t whole = first < head ? std::min(n, head - first) : 0;
  for (std::size_t j = 0; j < whole; ++j) check(j);
  for (std::size_t j = (1021 - first % 1021) % 1021; j < n; j += 1021) check(j);
  return wrong;
}

// An output file, checked as wrong_in() checks.
std::size_t wrong_in_file(const std::string& path, std::size_t n) {
  const int fd = open_or_die(path, O_RDONLY);
  struct stat st {};
  ::fstat(fd, &st);
  if (static_cast<std::size_t>(st.st_size) != n * sizeof(float)) {
    ::close(fd);
    return n;
  }
  std::vector<float> buf(kBlock / sizeof(float));
  std::size_t wrong = 0;
  for (std::size_t at = 0; at < n; at += buf.size()) {
    const std::size_t len = std::min(buf.size(), n - at);
    if (::pread(fd, buf.data(), len * sizeof(float), static_cast<off_t>(at * sizeof(float))) !=
        static_cast<ssize_t>(len * sizeof(float))) {
      fail("reading back " + path + " failed");
    }
    wrong += wrong_in(buf.data(), at, len);
  }
  ::close(fd);
  return wrong;
}

// A Sink that checks what it is handed and keeps nothing.
struct CheckingDiscard {
  std::atomic<std::size_t>* wrong;
  std::atomic<std::size_t>* seen;
  bool all_of_head;  // see wrong_in: true only where the run is not timed
  void operator()(std::size_t, std::size_t offset, ::cuda::std::span<const float> d) const {
    *wrong += wrong_in(d.data(), offset, d.size(), all_of_head);
    *seen += d.size();
  }
};

// The hand-written loop: one host thread preads chunk k into pinned buffer
// k % 2 (after that buffer's last copy out is done), copies it in on stream
// k % 2, runs the kernel, copies back, and (to a file) pwrites the result
// once that stream is done. `out_fd` < 0: discard, after checking.
std::size_t hand_loop(const std::string& in, int out_fd, std::size_t n, std::size_t chunk) {
  const int fd = open_or_die(in, O_RDONLY);
  chunkpipe::PinnedBuffer hin[2] = {chunkpipe::PinnedBuffer(chunk * 4), chunkpipe::PinnedBuffer(chunk * 4)};
  chunkpipe::PinnedBuffer hout[2] = {chunkpipe::PinnedBuffer(chunk * 4), chunkpipe::PinnedBuffer(chunk * 4)};
  chunkpipe::DeviceBuffer din[2] = {chunkpipe::DeviceBuffer(chunk * 4), chunkpipe::DeviceBuffer(chunk * 4)};
  chunkpipe::DeviceBuffer dout[2] = {chunkpipe::DeviceBuffer(chunk * 4), chunkpipe::DeviceBuffer(chunk * 4)};
  chunkpipe::Stream s[2] = {chunkpipe::Stream::create(), chunkpipe::Stream::create()};
  std::size_t pending[2] = {0, 0};  // elements buffer b's last chunk holds, and its first
  std::size_t pending_at[2] = {0, 0};
  std::size_t wrong = 0;
  auto drain = [&](int b) {
    if (pending[b] == 0) return;
    CHUNKPIPE_CUDA_TRY(cudaStreamSynchronize(s[b].get()));
    const float* y = reinterpret_cast<const float*>(hout[b].data());
    if (out_fd >= 0) {
      const std::size_t bytes = pending[b] * 4;
      if (::pwrite(out_fd, y, bytes, static_cast<off_t>(pending_at[b] * 4)) != static_cast<ssize_t>(bytes)) {
        fail("hand loop: pwrite failed");
      }
    } else {
      wrong += wrong_in(y, pending_at[b], pending[b], false);
    }
    pending[b] = 0;
  };
  for (std::size_t k = 0, at = 0; at < n; ++k, at += chunk) {
    const int b = static_cast<int>(k % 2);
    drain(b);
    const std::size_t len = std::min(chunk, n - at);
    if (::pread(fd, hin[b].data(), len * 4, static_cast<off_t>(at * 4)) != static_cast<ssize_t>(len * 4)) {
      fail("hand loop: pread came up short");
    }
    CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(din[b].data(), hin[b].data(), len * 4, cudaMemcpyHostToDevice, s[b].get()));
    fma8_kernel<<<static_cast<unsigned>((len + 255) / 256), 256, 0, s[b].get()>>>(
        reinterpret_cast<const float*>(din[b].data()), reinterpret_cast<float*>(dout[b].data()), len);
    CHUNKPIPE_CUDA_TRY(cudaGetLastError());
    CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(hout[b].data(), dout[b].data(), len * 4, cudaMemcpyDeviceToHost, s[b].get()));
    pending[b] = len;
    pending_at[b] = at;
  }
  drain(0);
  drain(1);
  ::close(fd);
  if (out_fd >= 0 && ::fsync(out_fd) != 0) fail("hand loop: fsync failed");
  return wrong;
}

struct Row {
  std::string section, variant;
  double gib = 0;
  bool cached = true;
  int threads = 0;
  double seconds = 0, gbps = 0, ratio = 0;
  std::string against;
};

struct Args {
  std::vector<std::size_t> gib{4};
  std::vector<int> threads{1, 2, 4, 8, 16};
  std::string dir = ".";
  int rounds = 3;
  bool uncached = true;
  bool explore = false;
  std::string csv = "storage_bench.csv";
};

std::vector<std::size_t> parse_list(const char* s) {
  std::vector<std::size_t> v;
  for (const char* p = s; *p;) {
    char* end = nullptr;
    v.push_back(std::strtoull(p, &end, 10));
    p = *end == ',' ? end + 1 : end;
    if (end == p && *p) break;
  }
  return v;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) fail("missing value for " + k);
      return argv[++i];
    };
    if (k == "--gib") {
      a.gib = parse_list(next());
    } else if (k == "--threads") {
      a.threads.clear();
      for (std::size_t t : parse_list(next())) a.threads.push_back(static_cast<int>(t));
    } else if (k == "--dir") {
      a.dir = next();
    } else if (k == "--rounds") {
      a.rounds = std::max(1, std::atoi(next()));
    } else if (k == "--cached-only") {
      a.uncached = false;
    } else if (k == "--explore") {
      a.explore = true;
    } else if (k == "--csv") {
      a.csv = next();
    } else {
      fail("unknown option " + k +
           " (--gib 4,16 --threads 1,2,4,8,16 --dir DIR --rounds 3 --cached-only --explore --csv FILE)");
    }
  }
  return a;
}

// --explore: where a cached file -> GPU -> discard run's time goes. Times
// the run under a few Options (slots, I/O threads, window), then prints one
// profiled run's report and timeline. For tuning; writes no CSV.
void explore(const std::string& in, std::size_t n, int rounds) {
  using Pipe = chunkpipe::ChunkedPipeline<chunkpipe::Map<Fma8>>;
  const std::size_t bytes = n * sizeof(float);
  struct Variant {
    const char* name;
    chunkpipe::Options o;
  };
  // Units (grain) against slots (depth) and the read team's size: the
  // slots' pinned memory is what the read team writes and the copies in
  // read, so how much of it there is may matter as much as how deep.
  const Variant variants[] = {
      {"Options{}", {}},
      {"depth 2", {.depth = 2}},
      {"depth 4", {.depth = 4}},
      {"host_threads 4", {.host_threads = 4}},
      {"host_threads 12", {.host_threads = 12}},
      {"grain 1 Mi", {.grain_elems = std::size_t{1} << 20}},
      {"grain 1 Mi, depth 4", {.depth = 4, .grain_elems = std::size_t{1} << 20}},
      {"grain 1 Mi, depth 6", {.depth = 6, .grain_elems = std::size_t{1} << 20}},
      {"grain 512 Ki, depth 4", {.depth = 4, .grain_elems = std::size_t{1} << 19}},
      {"grain 512 Ki, depth 8", {.depth = 8, .grain_elems = std::size_t{1} << 19}},
      {"grain 256 Ki, depth 8", {.depth = 8, .grain_elems = std::size_t{1} << 18}},
      {"grain 4 Mi", {.grain_elems = std::size_t{1} << 22}},
  };
  std::printf("  explore  8-thread pread into pinned            %6.2f GB/s\n", pread_rate(in, bytes, 8, false));
  std::printf("  explore  16-thread pread into pinned           %6.2f GB/s\n", pread_rate(in, bytes, 16, false));
  for (const Variant& v : variants) {
    Pipe pipe(v.o);
    std::atomic<std::size_t> wrong{0}, seen{0};
    pipe.run(chunkpipe::file_source<float>(in), chunkpipe::sink<float>(CheckingDiscard{&wrong, &seen, true}));
    std::vector<double> t;
    for (int r = 0; r < rounds; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      pipe.run(chunkpipe::file_source<float>(in), chunkpipe::sink<float>(CheckingDiscard{&wrong, &seen, false}));
      t.push_back(seconds_since(t0));
    }
    if (wrong != 0 || seen != n * static_cast<std::size_t>(rounds + 1)) fail("explore: wrong output");
    std::printf("  explore  %-28s unit %8zu depth %2d  %6.2f GB/s\n", v.name, pipe.geometry().chunk_elems,
                pipe.geometry().depth, bytes / median(t) / 1e9);
  }
  for (const Variant& v : {variants[0], variants[6]}) {  // the default, and 4 MiB units, 4 slots
    chunkpipe::Options o = v.o;
    o.profile = true;
    Pipe pipe(o);
    std::atomic<std::size_t> wrong{0}, seen{0};
    pipe.run(chunkpipe::file_source<float>(in), chunkpipe::sink<float>(CheckingDiscard{&wrong, &seen, false}));
    pipe.run(chunkpipe::file_source<float>(in), chunkpipe::sink<float>(CheckingDiscard{&wrong, &seen, false}));
    const chunkpipe::Report rep = pipe.report();
    std::cout << "== profiled, " << v.name << "\n" << rep << "\n" << chunkpipe::ascii_timeline(rep, 160) << "\n";
    for (chunkpipe::OpKind k : {chunkpipe::OpKind::host_in, chunkpipe::OpKind::h2d, chunkpipe::OpKind::stage,
                                chunkpipe::OpKind::d2h, chunkpipe::OpKind::host_out}) {
      double sum = 0;
      std::size_t count = 0;
      for (const chunkpipe::TimedOp& op : rep.ops) {
        if (op.kind == k) {
          sum += op.end_ms - op.start_ms;
          ++count;
        }
      }
      std::printf("  kind %d: %zu ops, mean %.3f ms, busy %.2f ms\n", static_cast<int>(k), count,
                  count ? sum / count : 0.0, chunkpipe::busy_ms(rep, k));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("storage_bench: no CUDA device; nothing to measure\n");
    return 0;
  }
  std::vector<Row> rows;
  auto add = [&](Row r) {
    std::printf("  %-8s %-34s %5.0f GiB %-8s %3d thr  %8.3f s  %6.2f GB/s", r.section.c_str(), r.variant.c_str(), r.gib,
                r.cached ? "cached" : "uncached", r.threads, r.seconds, r.gbps);
    if (r.ratio > 0) std::printf("  %.3f of %s", r.ratio, r.against.c_str());
    std::printf("\n");
    rows.push_back(std::move(r));
  };
  for (std::size_t gib : args.gib) {
    const std::size_t bytes = gib << 30, n = bytes / sizeof(float);
    const std::string in = args.dir + "/storage_bench_in.f32", out = args.dir + "/storage_bench_out.f32";
    std::printf("== %zu GiB of float (%s)\n", gib, in.c_str());
    make_input(in, bytes);
    if (args.explore) {
      explore(in, n, args.rounds);
      ::unlink(in.c_str());
      continue;
    }

    // -- The machine.
    double read8 = 0, best_sync = 0, best_direct = 0, best_uncached = 0;
    for (int t : args.threads) {
      std::vector<double> c;
      for (int r = 0; r < args.rounds; ++r) c.push_back(pread_rate(in, bytes, t, false));
      const double gbps = median(c);
      if (t == 8) read8 = gbps;
      add({"machine", "pread 8 MiB into pinned", double(gib), true, t, bytes / gbps / 1e9, gbps, 0, ""});
    }
    if (args.uncached) {
      for (int t : args.threads) {
        std::vector<double> u, d;
        for (int r = 0; r < args.rounds; ++r) {
          drop_cache(in);
          u.push_back(pread_rate(in, bytes, t, false));
          drop_cache(in);
          d.push_back(pread_rate(in, bytes, t, true));
        }
        best_uncached = std::max(best_uncached, median(u));
        best_direct = std::max(best_direct, median(d));
        add({"machine", "pread, page cache dropped", double(gib), false, t, bytes / median(u) / 1e9, median(u), 0, ""});
        add({"machine", "pread O_DIRECT", double(gib), false, t, bytes / median(d) / 1e9, median(d), 0, ""});
      }
    }
    for (int t : args.threads) {
      std::vector<double> w, s;
      for (int r = 0; r < args.rounds; ++r) {
        const auto rates = pwrite_rate(out, bytes, t);
        w.push_back(rates.first);
        s.push_back(rates.second);
      }
      best_sync = std::max(best_sync, median(s));
      add({"machine", "pwrite 8 MiB", double(gib), true, t, bytes / median(w) / 1e9, median(w), 0, ""});
      add({"machine", "pwrite 8 MiB, then fsync", double(gib), true, t, bytes / median(s) / 1e9, median(s), 0, ""});
    }
    // What file_sink does (one writer, each block's write-back started at
    // once): not part of best_sync, the issue's yardstick, but printed so
    // that a ratio above 1 against it is explained.
    {
      std::vector<double> s;
      for (int r = 0; r < args.rounds; ++r) s.push_back(pwrite_rate(out, bytes, 1, true).second);
      add({"machine", "pwrite 8 MiB + write-back, then fsync", double(gib), true, 1, bytes / median(s) / 1e9,
           median(s), 0, ""});
    }

    // -- The pinned pipeline: what the link and the GPU allow.
    using Pipe = chunkpipe::ChunkedPipeline<chunkpipe::Map<Fma8>>;
    Pipe pipe;
    const std::size_t unit = pipe.geometry().chunk_elems;
    double pinned_gbps = 0;
    {
      chunkpipe::PinnedArray<float> x(n), y(n);
      for (std::size_t i = 0; i < n; ++i) x.data()[i] = value_at(i);
      std::memset(y.data(), 0xFF, n * sizeof(float));
      pipe.run(chunkpipe::pinned(x), chunkpipe::pinned(y));  // warm: slots, calibration
      if (wrong_in(y.data(), 0, n) != 0) fail("the pinned pipeline's output is wrong");
      std::vector<double> t;
      for (int r = 0; r < args.rounds; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        pipe.run(chunkpipe::pinned(x), chunkpipe::pinned(y));
        t.push_back(seconds_since(t0));
      }
      pinned_gbps = bytes / median(t) / 1e9;
      add({"pinned", "pipeline, pinned in and out", double(gib), true, 0, median(t), pinned_gbps, 0, ""});
    }
    const double read_bound = std::min(read8, pinned_gbps);
    const char* read_bound_name = read8 < pinned_gbps ? "8-thread read" : "pinned pipeline";

    // -- Files through the pipeline and through the hand loop.
    auto timed = [&](const std::function<void()>& before, const std::function<void()>& run) {
      std::vector<double> t;
      for (int r = 0; r < args.rounds; ++r) {
        before();
        const auto t0 = std::chrono::steady_clock::now();
        run();
        t.push_back(seconds_since(t0));
      }
      return median(t);
    };
    {
      // Warm the file path: its first run makes the pinned staging slots a
      // Source and a Sink work in, which no later run pays for.
      std::atomic<std::size_t> wrong{0}, seen{0};
      pipe.run(chunkpipe::file_source<float>(in), chunkpipe::sink<float>(CheckingDiscard{&wrong, &seen, true}));
      if (wrong != 0 || seen != n) fail("file -> discard (warm-up): wrong output");
    }
    for (bool cached : {true, false}) {
      if (!cached && !args.uncached) continue;
      auto prepare = [&] {
        if (cached) {
          pread_rate(in, bytes, 8, false);  // in the page cache
        } else {
          drop_cache(in);
        }
      };
      std::atomic<std::size_t> wrong{0}, seen{0};
      const double pipe_s = timed(prepare, [&] {
        pipe.run(chunkpipe::file_source<float>(in), chunkpipe::sink<float>(CheckingDiscard{&wrong, &seen, false}));
      });
      if (wrong != 0 || seen != n * static_cast<std::size_t>(args.rounds)) fail("file -> discard: wrong output");
      std::size_t hand_wrong = 0;
      const double hand_s = timed(prepare, [&] { hand_wrong += hand_loop(in, -1, n, unit); });
      if (hand_wrong != 0) fail("hand loop -> discard: wrong output");
      const double bound = cached ? read_bound : std::max(best_uncached, best_direct);
      add({"files", "file -> GPU -> discard", double(gib), cached, 0, pipe_s, bytes / pipe_s / 1e9,
           bytes / pipe_s / 1e9 / bound, cached ? read_bound_name : "best uncached read"});
      add({"hand", "file -> GPU -> discard", double(gib), cached, 1, hand_s, bytes / hand_s / 1e9,
           bytes / hand_s / 1e9 / bound, cached ? read_bound_name : "best uncached read"});
      add({"files", "  against the hand loop", double(gib), cached, 0, pipe_s, bytes / pipe_s / 1e9, hand_s / pipe_s,
           "hand loop (x faster)"});

      // The three file -> file runs take turns, round by round, so that what
      // the disk still does for one (write-back, freeing the last run's
      // blocks) falls on each alike.
      std::vector<double> with_temp, without_temp, by_hand;
      for (int r = 0; r < args.rounds; ++r) {
        for (int variant = 0; variant < 3; ++variant) {
          prepare();
          ::unlink(out.c_str());
          const auto t0 = std::chrono::steady_clock::now();
          if (variant < 2) {
            chunkpipe::FileSinkOptions o;
            o.temporary = variant == 0;
            pipe.run(chunkpipe::file_source<float>(in), chunkpipe::file_sink<float>(out, o));
          } else {
            const int fd = open_or_die(out, O_WRONLY | O_CREAT | O_TRUNC);
            hand_loop(in, fd, n, unit);
            ::close(fd);
          }
          (variant == 0 ? with_temp : variant == 1 ? without_temp : by_hand).push_back(seconds_since(t0));
          if (wrong_in_file(out, n) != 0) fail(variant < 2 ? "file -> file: wrong output" : "hand loop -> file: wrong output");
        }
      }
      const double ws = median(with_temp), ns = median(without_temp), hs = median(by_hand);
      add({"files", "file -> GPU -> file (.partial, fsync)", double(gib), cached, 0, ws, bytes / ws / 1e9,
           bytes / ws / 1e9 / best_sync, "best write+fsync"});
      add({"files", "file -> GPU -> file, temporary off", double(gib), cached, 0, ns, bytes / ns / 1e9,
           bytes / ns / 1e9 / best_sync, "best write+fsync"});
      add({"files", "  temporary off against the default", double(gib), cached, 0, ns, bytes / ns / 1e9, ws / ns,
           "default (x faster)"});
      add({"hand", "file -> GPU -> file (fsync)", double(gib), cached, 1, hs, bytes / hs / 1e9,
           bytes / hs / 1e9 / best_sync, "best write+fsync"});
      add({"files", "  against the hand loop", double(gib), cached, 0, ws, bytes / ws / 1e9, hs / ws,
           "hand loop (x faster)"});
      ::unlink(out.c_str());
    }
    ::unlink(in.c_str());
  }

  if (FILE* f = std::fopen(args.csv.c_str(), "w")) {
    std::fprintf(f, "section,variant,gib,cached,threads,seconds,gbps,ratio,against\n");
    for (const Row& r : rows) {
      std::fprintf(f, "%s,\"%s\",%.0f,%d,%d,%.4f,%.3f,%.4f,\"%s\"\n", r.section.c_str(), r.variant.c_str(), r.gib,
                   r.cached ? 1 : 0, r.threads, r.seconds, r.gbps, r.ratio, r.against.c_str());
    }
    std::fclose(f);
    std::printf("wrote %s\n", args.csv.c_str());
  }
  return 0;
}
