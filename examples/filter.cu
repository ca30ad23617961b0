// SPDX-License-Identifier: MIT
//
// filter: the records of a request log that match a predicate, from a file
// into a file through the GPU chunk by chunk, checked byte for byte against
// std::copy_if on the host.
//
// How much a filter keeps is known only once the GPU has looked at the data,
// so the obvious hand-written loop copies a full-length answer back (a flag
// per record, or every record) and lets the host find the matches.
// chunkpipe::filter packs them on the GPU (CUB's select) and sends back only those:
//
//   auto pipe = chunkpipe::make_pipeline(opts, chunkpipe::filter(SlowWarning{250.f}));
//   std::size_t kept = pipe.run(chunkpipe::file_source<Record>(in), chunkpipe::file_sink<Record>(out));
//
// Each chunk's count comes back first (8 bytes); a chunkpipe host thread reads
// it and copies exactly that many records, after the earlier chunks' ones.
// `out` may also be a range in memory shorter than the input (below: exactly
// the result's size); a run that keeps more than fits throws pipeline_error,
// having written nothing past the end.
//
// Timed in the same process, every pass checked against std::copy_if:
//   (a) chunkpipe, file -> file: file_source -> filter -> file_sink;
//   (b) chunkpipe, pinned -> pinned: PinnedArray<Record> in and out;
//   (c) hand-written: a double-buffered loop that brings back a flag per
//       record and compacts on the host (see HandWritten).
//
// Build: target `filter`, or nvcc -std=c++17 -O3 -arch=sm_90 -I include examples/filter.cu
// Run:   ./filter [--mib 4096] [--file PATH] [--keep 10] [--rounds 3] [--chunk-mib 16]
// Needs the data's size in pinned host memory and, without --file, on disk.

#include <chunkpipe/files.hpp>
#include <chunkpipe/pipeline.cuh>

#include <cuda_runtime.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "support.hpp"

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// One request of a service's log. No padding, so comparing bytes compares records.
struct Record {
  std::uint32_t id;     // the request's index in the log
  std::uint32_t level;  // 0 debug, 1 info, 2 notice, 3 warning, 4 error, 5 fatal
  float latency_ms;
  std::uint32_t code;   // HTTP status
};
static_assert(sizeof(Record) == 16, "four 4-byte fields and no padding");

// The predicate: slow requests logged as a warning or worse. Called on the
// GPU by the filter stage and the hand-written kernel, and on the host by
// the reference, so all three keep exactly the same records.
struct SlowWarning {
  float threshold_ms;
  CHUNKPIPE_HOST_DEVICE bool operator()(const Record& r) const {
    return r.level >= 3 && r.latency_ms > threshold_ms;
  }
};
constexpr float kThresholdMs = 250.f;

// Record i of the generated log: a hash of i decides whether it matches,
// with probability keep%. The others fail the level clause, the latency
// clause (down to exactly the threshold: the test is strict) or both, so
// a predicate missing either clause would keep too much.
Record make_record(std::size_t i, unsigned keep_percent) {
  const auto seed = static_cast<std::uint32_t>(i >> 32);
  const std::uint32_t a = example::mix(i, seed), b = example::mix(i, seed ^ 0x5bd1e995u);
  static constexpr std::uint32_t codes[8] = {200, 200, 200, 201, 304, 404, 500, 503};
  const std::uint32_t u = a / 10000;
  const bool match = a % 10000 < keep_percent * 100;
  const bool high = match || u % 3 == 1;  // level >= 3
  const bool slow = match || u % 3 == 0;  // latency > threshold
  Record r{static_cast<std::uint32_t>(i), high ? 3 + u / 3 % 3 : u / 3 % 3, 0.f, codes[b % 8]};
  r.latency_ms = slow ? kThresholdMs + 0.01f * static_cast<float>(1 + (b >> 3) % 100000)
                      : std::min(kThresholdMs, 0.01f * static_cast<float>((b >> 3) % 25001));
  return r;
}

// A temporary directory for the log and the output, removed at the end
// (with the sink's temporary, should a run have failed before cleaning up).
struct ScratchDir {
  std::string dir, log, out;
  ScratchDir() {
    const char* tmp = std::getenv("TMPDIR");
    dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/chunkpipe_filter.XXXXXX";
    if (::mkdtemp(dir.data()) == nullptr) throw std::runtime_error("cannot make " + dir + ": " + std::strerror(errno));
    log = dir + "/log.rec";
    out = dir + "/kept.rec";
  }
  ~ScratchDir() {
    for (const std::string& f : {log, out, out + ".partial"}) (void)::unlink(f.c_str());
    (void)::rmdir(dir.c_str());
  }
};

// Reads (or writes) exactly `bytes` at the start of a file, or throws.
void transfer(const std::string& path, void* data, std::size_t bytes, bool write) {
  std::FILE* f = std::fopen(path.c_str(), write ? "wb" : "rb");
  if (f == nullptr) throw std::runtime_error("cannot open '" + path + "': " + std::strerror(errno));
  const std::size_t done = write ? std::fwrite(data, 1, bytes, f) : std::fread(data, 1, bytes, f);
  if (std::fclose(f) != 0 || done != bytes) {
    throw std::runtime_error((write ? "writing '" : "reading '") + path + "' failed after " + std::to_string(done) +
                             " of " + std::to_string(bytes) + " bytes");
  }
}

// Why `got` (count records) is not `want` ("" if it is), byte for byte.
std::string mismatch(const Record* got, std::size_t count, const std::vector<Record>& want) {
  if (count != want.size()) return "kept " + std::to_string(count) + ", std::copy_if " + std::to_string(want.size());
  for (std::size_t i = 0; i < count; ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(Record)) != 0) return "kept record " + std::to_string(i) + " differs";
  }
  return "";
}

// (c) The hand-written alternative, what one writes without chunkpipe: kLanes
// streams take chunks in turn, each with its own buffers, so chunk k's copy
// in, chunk k-1's kernel and chunk k-2's copy back overlap. The kernel writes
// a 1-byte flag per record and every flag comes back (full length: only the
// flags say how many matched); this thread compacts chunk k-kLanes while the
// GPU works on later ones. Flags are the cheapest full-length answer: with a
// Map before the filter, the transformed 16-byte records would have to come
// back. Buffers are allocated once, outside the clock, like the pipeline's.
__global__ void flag_kernel(const Record* in, std::size_t n, SlowWarning pred, std::uint8_t* flags) {
  const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += stride) {
    flags[i] = pred(in[i]) ? 1 : 0;
  }
}

class HandWritten {
 public:
  static constexpr std::size_t kLanes = 3;
  explicit HandWritten(std::size_t chunk) : chunk_(chunk) {
    for (std::size_t l = 0; l < kLanes; ++l) lanes_.emplace_back(chunk);
  }

  // `in` is pinned, so its copies are truly asynchronous.
  void run(const Record* in, std::size_t n, SlowWarning pred, std::vector<Record>& out) {
    out.clear();  // keeps its capacity: only the warm-up pass grows it
    const std::size_t chunks = (n + chunk_ - 1) / chunk_;
    auto compact = [&](std::size_t k) {
      const Lane& l = lanes_[k % kLanes];
      CHUNKPIPE_CUDA_TRY(cudaStreamSynchronize(l.s()));  // chunk k's flags have arrived
      const std::size_t begin = k * chunk_, count = std::min(chunk_, n - begin);
      for (std::size_t i = 0; i < count; ++i) {
        if (l.host_flags[i]) out.push_back(in[begin + i]);
      }
    };
    for (std::size_t k = 0; k < chunks; ++k) {
      if (k >= kLanes) compact(k - kLanes);  // frees the lane chunk k reuses
      const Lane& l = lanes_[k % kLanes];
      const std::size_t begin = k * chunk_, count = std::min(chunk_, n - begin);
      auto* records = reinterpret_cast<Record*>(l.records.data());
      auto* flags = reinterpret_cast<std::uint8_t*>(l.flags.data());
      const auto blocks = static_cast<unsigned>(std::clamp<std::size_t>((count + 255) / 256, 1, 4096));
      CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(records, in + begin, count * sizeof(Record), cudaMemcpyHostToDevice, l.s()));
      flag_kernel<<<blocks, 256, 0, l.s()>>>(records, count, pred, flags);
      CHUNKPIPE_CUDA_TRY(cudaGetLastError());
      CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(l.host_flags.data(), flags, count, cudaMemcpyDeviceToHost, l.s()));
    }
    for (std::size_t k = chunks > kLanes ? chunks - kLanes : 0; k < chunks; ++k) compact(k);
  }

 private:
  struct Lane {  // chunkpipe's RAII owners only, so that nothing leaks on a throw
    explicit Lane(std::size_t chunk)
        : stream(chunkpipe::Stream::create()), records(chunk * sizeof(Record)), flags(chunk), host_flags(chunk) {}
    cudaStream_t s() const { return stream.get(); }
    chunkpipe::Stream stream;
    chunkpipe::DeviceBuffer records, flags;
    chunkpipe::PinnedArray<std::uint8_t> host_flags;
  };
  std::size_t chunk_;
  std::vector<Lane> lanes_;
};

struct Args {
  std::string file;
  long long mib = 4096, keep = 10, rounds = 3, chunk_mib = 16;
};

const char* const kUsage =
    "filter: the records of a log that match a predicate, file to file through chunkpipe::filter\n"
    "usage: filter [--mib N] [--file PATH] [--keep PERCENT] [--rounds R] [--chunk-mib N]\n"
    "  --mib N           MiB of 16-byte records to generate into a temporary file (default 4096)\n"
    "  --file PATH       filter this file of records instead (kept; --mib and --keep are then ignored)\n"
    "  --keep PERCENT    share of generated records the predicate matches (default 10)\n"
    "  --rounds R        timed rounds per path, after one warm-up; all are checked (default 3)\n"
    "  --chunk-mib N     MiB of records per chunk, chunkpipe's and the hand-written loop's (default 16)\n"
    "  --help            this text\n"
    "The predicate: level >= 3 (warning or worse) && latency_ms > 250.\n";

int parse_args(int argc, char** argv, Args& args) {
  return example::CommandLine("filter", kUsage)
      .integer("--mib", args.mib, 1, 1ll << 16)
      .text("--file", args.file)
      .integer("--keep", args.keep, 0, 100)
      .integer("--rounds", args.rounds, 1, 100)
      .integer("--chunk-mib", args.chunk_mib, 1, 4096)
      .parse(argc, argv);
}

int run(const Args& args) {
  std::printf("GPU: %s\n", example::current_gpu().name);

  // The log, in pinned memory and in a file: --file is read in, or records
  // are generated and written to the scratch directory, which also takes
  // the output. Declared before the pipeline, which keeps its last source
  // open, so that they are removed after it.
  ScratchDir scratch;
  std::string path = args.file.empty() ? scratch.log : args.file;
  std::size_t n = static_cast<std::size_t>(args.mib) * (kMiB / sizeof(Record));
  if (!args.file.empty()) {
    struct ::stat st {};
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0 || st.st_size % sizeof(Record)) {
      throw std::runtime_error("--file '" + path + "' is not a non-empty regular file of 16-byte records");
    }
    n = static_cast<std::size_t>(st.st_size) / sizeof(Record);
  }
  const std::size_t in_bytes = n * sizeof(Record);
  chunkpipe::PinnedArray<Record> records(n);
  auto t0 = example::Clock::now();
  if (args.file.empty()) {  // one thread: a few seconds for the default 4 GiB
    for (std::size_t i = 0; i < n; ++i) records[i] = make_record(i, static_cast<unsigned>(args.keep));
  }
  transfer(path, records.data(), in_bytes, /*write=*/args.file.empty());
  std::printf("%s %s: %zu records, %zu MiB, in %.0f ms\n", args.file.empty() ? "wrote" : "read", path.c_str(), n,
              in_bytes / kMiB, example::ms_between(t0, example::Clock::now()));

  // The reference: the host's own std::copy_if over the same records.
  const SlowWarning pred{kThresholdMs};
  std::vector<Record> want;
  t0 = example::Clock::now();
  std::copy_if(records.begin(), records.end(), std::back_inserter(want), pred);
  const std::size_t kept_bytes = want.size() * sizeof(Record);
  std::printf("std::copy_if (1 thread) kept %zu records (%.2f%%) in %.0f ms\n", want.size(),
              100.0 * static_cast<double>(want.size()) / static_cast<double>(n),
              example::ms_between(t0, example::Clock::now()));

  auto source = chunkpipe::file_source<Record>(path);  // opens now; each run reads from the start
  const std::size_t chunk = static_cast<std::size_t>(args.chunk_mib) * (kMiB / sizeof(Record));
  auto pipe = chunkpipe::make_pipeline(chunkpipe::Options{.chunk_elems = chunk}, chunkpipe::filter(pred));
  const auto& g = pipe.geometry();
  const std::size_t chunks = (n + g.chunk_elems - 1) / g.chunk_elems;
  std::printf("pipeline: %s, %d slots of %zu records; %zu chunks\n\n",
              std::string(chunkpipe::to_string(g.policy)).c_str(), g.depth, g.chunk_elems, chunks);

  // Each path: one warm-up pass (module load, slots), then --rounds timed.
  // Every pass returns with its output complete on the host (a file: renamed
  // into place) and is then checked, outside the clock.
  struct Row {
    const char* path;
    double back_bytes;  // what crossed back over the link per pass
    example::Timing t;
    std::string why;    // the first failed check, or ""
  };
  std::vector<Row> rows;
  auto measure = [&](const char* name, double back_bytes, auto&& pass, auto&& check) {
    Row& r = rows.emplace_back(Row{name, back_bytes, {}, ""});
    std::vector<double> ms;
    for (long long round = 0; round <= args.rounds; ++round) {
      const auto start = example::Clock::now();
      const std::size_t count = pass();
      if (round > 0) ms.push_back(example::ms_between(start, example::Clock::now()));
      if (const std::string why = check(count); r.why.empty()) r.why = why;
    }
    r.t = example::summarise(std::move(ms));
  };
  // The GPU's count of each chunk crosses back too: 8 bytes a chunk.
  const double cp_back = static_cast<double>(kept_bytes + chunks * sizeof(std::size_t));

  // (a) File to file. A sink writes one run, so each pass makes its own.
  // sync off: the output is a scratch file, so waiting for the disk to
  // flush it would time the disk, not the filter (the default waits).
  measure(
      "(a) chunkpipe, file -> file", cp_back,
      [&] { return pipe.run(source, chunkpipe::file_sink<Record>(scratch.out, {.temporary = true, .sync = false})); },
      [&](std::size_t count) {
        struct ::stat st {};
        if (::stat(scratch.out.c_str(), &st) != 0) return std::string("no output file");
        std::vector<Record> got(static_cast<std::size_t>(st.st_size) / sizeof(Record));
        transfer(scratch.out, got.data(), got.size() * sizeof(Record), /*write=*/false);
        (void)::unlink(scratch.out.c_str());  // the next pass must write its own
        return count != got.size() ? "run() returned " + std::to_string(count) + ", the file holds " +
                                         std::to_string(got.size())
                                   : mismatch(got.data(), got.size(), want);
      });

  // (b) Pinned memory to pinned memory. The output holds exactly what is
  // kept: a Filter's output may be shorter than its input.
  chunkpipe::PinnedArray<Record> kept(want.size());
  example::poison(kept.data(), kept.size());  // a record nobody wrote can never match
  measure(
      "(b) chunkpipe, pinned -> pinned", cp_back,
      [&] { return pipe.run(chunkpipe::pinned(records), chunkpipe::pinned(kept)); },
      [&](std::size_t count) {
        std::string why = mismatch(kept.data(), count, want);
        example::poison(kept.data(), kept.size());  // for the next pass
        return why;
      });

  // (c) Hand-written, on the same chunk size.
  HandWritten hand(g.chunk_elems);
  std::vector<Record> hand_out;
  measure(
      "(c) hand-written, flags + host", static_cast<double>(n),
      [&] {
        hand.run(records.data(), n, pred, hand_out);
        return hand_out.size();
      },
      [&](std::size_t count) { return mismatch(hand_out.data(), count, want); });

  // The table; "check" says whether every pass equalled std::copy_if byte for byte.
  bool ok = true;
  std::printf("%-32s %10s %8s %17s %9s  %s\n", "path", "median ms", "GB/s in", "GB/s in+selected", "MiB back",
              "check");
  for (const Row& r : rows) {
    const double s = r.t.median / 1e3;
    std::printf("%-32s %10.1f %8.1f %17.1f %9.1f  %s\n", r.path, r.t.median, static_cast<double>(in_bytes) / 1e9 / s,
                static_cast<double>(in_bytes + kept_bytes) / 1e9 / s, r.back_bytes / kMiB,
                r.why.empty() ? "PASS" : ("FAIL: " + r.why).c_str());
    ok = ok && r.why.empty();
  }
  std::printf(
      "\nGB/s: %.2f GB of records in, or that plus the %.2f GB selected, over the median of %lld rounds.\n"
      "Row (a) reads its file too, likely from the page cache (it was just %s), and writes the selection.\n",
      static_cast<double>(in_bytes) / 1e9, static_cast<double>(kept_bytes) / 1e9, args.rounds,
      args.file.empty() ? "written" : "read");
  std::printf(
      "Only the kept records crossed back: each chunk's count comes back alone, and a chunkpipe host thread\n"
      "reads it and copies exactly that many, so %.1f MiB came back for %zu MiB in; the hand-written loop\n"
      "brought back a flag for every record and then scanned them all on the host.\n",
      cp_back / kMiB, in_bytes / kMiB);
  std::printf("\n%s\n", ok ? "PASS: every path kept exactly what std::copy_if kept" : "FAIL");
  return ok ? EXIT_SUCCESS : EXIT_FAILURE;
}

}  // namespace

int main(int argc, char** argv) {
  // Reads the command line, checks for a GPU (77 without one) and runs
  // (support.hpp). An exception is printed and gives EXIT_FAILURE.
  return example::run_example("filter", argc, argv, parse_args, run);
}
