// SPDX-License-Identifier: MIT
//
// graphs_bench: chunkpipe's CUDA-graph executor against its stream executor
// and against the hand-written loop, issued on streams and captured into a
// graph by hand, in one process, on 1 GiB of pinned float each way (two
// such pairs, A and B, with different data, for the updates):
//
//   grid     one run of the GiB per pass, at windows of 64 KiB to 64 MiB x
//            0, 512 and 4096 FMAs per element. Per cell: the hand-written
//            4-slot loop (hand_loop.hpp: chunk k on stream k % 4, copy in,
//            kernel, copy out) on streams; the same loop captured once into
//            a graph (stream capture: an origin stream forks to the 4
//            streams and joins them back; capture and instantiate timed
//            once per cell) and replayed; chunkpipe slot_streams d4 and
//            stage_streams d3 at the window on the streams and the graphs
//            executor (a graphs pipeline's checked run builds its graph, so
//            the timed runs replay it); chunkpipe's default (only the
//            window set). After timing, the hand graph is pointed at B:
//            every copy node re-pointed (cudaGraphExecMemcpyNodeSetParams1D),
//            and updated from a re-capture (cudaGraphExecUpdate).
//   update   a graphs pipeline (slot_streams d4) at 64 KiB and 1 MiB
//            windows run alternately over A and B, so that every run after
//            the first updates its graph: GraphStats' update_ms against the
//            first run's build_ms + instantiate_ms (target: >= 10x), and
//            the device time of building, updating and replaying runs.
//   b2b      1024 run_async of 1 MiB back to back (the GiB), then wait for
//            all, with Options{} on each executor: streams, graphs, auto
//            (target: graphs and auto at least as fast as streams).
//
// Every variant is checked before it is timed: its output poisoned (NaN),
// then every element against the closed form of the FMA chain (O(n)
// whatever the FMAs, so nothing is sampled; the scan is split over the
// host's cores) and, within a cell, bit for bit against the hand loop's
// output (same kernel, same bits). The input is varied and never zero. A
// mismatch makes the program exit non-zero. Passes are timed with CUDA
// events (event_clock.hpp) in interleaved rounds, in an order rotated each
// round; ratios are medians of per-round ratios. Host costs (capture,
// instantiate, update) are steady_clock around the calls. Prints a table
// per section; writes one CSV row per measured figure.
#include <chunkpipe/pipeline.cuh>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "event_clock.hpp"
#include "hand_loop.hpp"
#include "probes/probe.hpp"
#include "support.hpp"

namespace {

constexpr std::size_t kKiB = 1024, kMiB = kKiB * 1024;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The lesson's chain of FMAs, as the probes and streams_bench time it.
using probe::Fma;
using bench::ClosedForm;
using timing::median_of;
using timing::paired_ratio;
using timing::time_rounds;
using bench::HandLoop;
using chunkpipe::Executor;
using chunkpipe::Policy;
using Pipe = chunkpipe::ChunkedPipeline<chunkpipe::Map<Fma>>;
using HostClock = std::chrono::steady_clock;

double ms_since(HostClock::time_point t0) {
  return std::chrono::duration<double, std::milli>(HostClock::now() - t0).count();
}

struct Args {
  std::size_t total_mib = 1024;
  int rounds = 3;
  std::vector<std::size_t> window_kib{64, 256, 1024, 4096, 16384, 65536};
  std::vector<std::size_t> fmas{0, 512, 4096};
  std::string csv = "graphs_bench.csv";
};

// A pair of pinned arrays a run reads and writes.
struct Pair {
  const char* name;
  const float* in;
  float* out;
};


// "64 KiB", "16 MiB".
std::string size_text(std::size_t bytes) {
  return bytes % kMiB == 0 ? std::to_string(bytes / kMiB) + " MiB" : std::to_string(bytes / kKiB) + " KiB";
}


// The first i in [0, n) where out[i] is not the closed form of in[i], or n.
// Split over the host's cores: a serial scan of the GiB takes about half a
// second, and the grid checks some 180 outputs.
std::size_t first_wrong(const float* in, const float* out, std::size_t n, const ClosedForm& closed) {
  const std::size_t parts = std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, 16);
  const std::size_t step = (n + parts - 1) / parts;
  std::vector<std::size_t> bad(parts, n);
  std::vector<std::thread> threads;
  for (std::size_t p = 0; p < parts; ++p) {
    threads.emplace_back([&, p] {
      const std::size_t lo = std::min(n, p * step), hi = std::min(n, lo + step);
      for (std::size_t i = lo; i < hi; ++i) {
        if (!closed.matches(in[i], out[i])) {
          bad[p] = i;
          return;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return *std::min_element(bad.begin(), bad.end());
}

// Poisons `out`, runs `pass` (which returns once the output is on the
// host), then checks every element against the closed form of `in`, and
// bit for bit against `ref` when given (the first output checked into an
// empty `ref` fills it). Says what and where otherwise.
bool check(const std::string& name, const std::function<void()>& pass, const float* in, float* out,
           std::size_t total, Fma f, std::vector<float>* ref) {
  example::poison(out, total);
  pass();
  const ClosedForm closed(f.iters);
  if (const std::size_t i = first_wrong(in, out, total, closed); i != total) {
    std::fprintf(stderr, "FAIL: %s wrong at element %zu: %g, want %g\n", name.c_str(), i, out[i], closed(in[i]));
    return false;
  }
  if (ref != nullptr) {
    if (ref->empty()) {
      ref->assign(out, out + total);
    } else if (std::memcmp(ref->data(), out, total * sizeof(float)) != 0) {
      std::size_t i = 0;
      while (example::same_bits((*ref)[i], out[i])) ++i;
      std::fprintf(stderr, "FAIL: %s differs from the hand-written loop's bits at element %zu: %.9g, loop %.9g\n",
                   name.c_str(), i, out[i], (*ref)[i]);
      return false;
    }
  }
  return true;
}

// A chunkpipe pipeline timed as a variant: the tickets of its last pass,
// and what its graph executor had done when timing began.
struct CpRun {
  Pipe pipe;
  std::vector<chunkpipe::RunTicket> tickets;
  chunkpipe::GraphStats before;
  std::string first_ran_on;  // what issued the checked pass
  CpRun(const chunkpipe::Options& o, Fma f) : pipe(o, chunkpipe::Map<Fma>{f}) {}
};

// One timed variant: issue() queues a pass, join(s) makes s wait for it,
// finish() waits for its tickets (reporting errors).
struct Variant {
  std::string name;
  std::function<void()> issue;
  std::function<void(cudaStream_t)> join;
  std::function<void()> finish = [] {};
  CpRun* cp = nullptr;           // a chunkpipe variant's pipeline
  std::string ran_on = "streams";  // the hand variants' executor; chunkpipe's is read from tickets
  std::vector<double> ms, issue_us;
};

// The variant's pass, to completion: what check() runs.
std::function<void()> complete(Variant& v) {
  return [&v] {
    v.issue();
    CHUNKPIPE_CUDA_TRY(cudaDeviceSynchronize());
    v.finish();
  };
}



// Back-to-back run_async of `run_elems` over consecutive slices of `p`
// (one run when run_elems is the whole array).
Variant pipe_variant(const std::string& name, CpRun& c, Pair p, std::size_t total, std::size_t run_elems) {
  Variant v;
  v.name = name;
  v.cp = &c;
  v.issue = [&c, p, total, run_elems] {
    c.tickets.clear();
    for (std::size_t off = 0; off < total; off += run_elems) {
      const std::size_t n = std::min(run_elems, total - off);
      c.tickets.push_back(c.pipe.run_async(chunkpipe::pinned(chunkpipe::host_span(p.in + off, n)),
                                           chunkpipe::pinned(chunkpipe::host_span(p.out + off, n))));
    }
  };
  v.join = [&c](cudaStream_t s) {
    for (auto& t : c.tickets) t.enqueue_wait(s);
  };
  v.finish = [&c] {
    for (auto& t : c.tickets) t.wait();
  };
  return v;
}

// What issued a pass's runs: "graphs", or "graphs 1023 + streams 1".
std::string executors_of(const std::vector<chunkpipe::RunTicket>& tickets) {
  std::map<std::string, std::size_t> count;
  for (const auto& t : tickets) ++count[std::string(chunkpipe::to_string(t.executor()))];
  if (count.size() == 1) return count.begin()->first;
  std::string s;
  for (const auto& [name, n] : count) s += (s.empty() ? "" : " + ") + name + " " + std::to_string(n);
  return s;
}

// The first reason a run gave for taking streams when graphs were asked for.
std::string note_of(const std::vector<chunkpipe::RunTicket>& tickets) {
  for (const auto& t : tickets) {
    if (std::string note = t.executor_note(); !note.empty()) return note;
  }
  return {};
}

// A chunkpipe variant's executor after timing, with the checked pass's
// when it differed (the automatic executor may switch once a shape repeats).
std::string ran_on(const Variant& v) {
  if (v.cp == nullptr) return v.ran_on;
  std::string s = executors_of(v.cp->tickets);
  if (s != v.cp->first_ran_on) s += " (checked pass: " + v.cp->first_ran_on + ")";
  return s;
}

// What a graph executor did between two GraphStats, and what it holds after.
std::string stats_delta(const chunkpipe::GraphStats& a, const chunkpipe::GraphStats& b) {
  return std::to_string(b.built - a.built) + " built, " + std::to_string(b.updated - a.updated) + " updated, " +
         std::to_string(b.replayed - a.replayed) + " replayed, " + std::to_string(b.on_streams - a.on_streams) +
         " on streams, " + std::to_string(b.cached) + " cached";
}

// The hand loop captured into one CUDA graph: an origin stream forks to the
// loop's 4 streams through an event, the loop issues exactly as on streams,
// the streams join back to the origin, and the capture ends. Replayed as
// one launch. Its copy nodes can be pointed at other arrays of the same
// size without a rebuild, either node by node or from a re-capture.
class HandGraph {
 public:
  double capture_ms = 0, instantiate_ms = 0;
  std::size_t nodes = 0;

  explicit HandGraph(HandLoop& h)
      : h_(h), origin_(chunkpipe::Stream::create()), fork_(chunkpipe::Event::create()),
        done_(chunkpipe::Event::create()), in_(h.in), out_(h.out) {
    const auto t0 = HostClock::now();
    graph_ = capture();
    capture_ms = ms_since(t0);
    const auto t1 = HostClock::now();
    CHUNKPIPE_CUDA_TRY(cudaGraphInstantiate(&exec_, graph_, 0));
    instantiate_ms = ms_since(t1);
    collect_copies();
  }
  ~HandGraph() {
    if (exec_ != nullptr) (void)cudaGraphExecDestroy(exec_);
    if (graph_ != nullptr) (void)cudaGraphDestroy(graph_);
  }
  HandGraph(const HandGraph&) = delete;
  HandGraph& operator=(const HandGraph&) = delete;

  void launch() { CHUNKPIPE_CUDA_TRY(cudaGraphLaunch(exec_, origin_.get())); }
  void join(cudaStream_t waiter) {
    CHUNKPIPE_CUDA_TRY(cudaEventRecord(done_.get(), origin_.get()));
    CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(waiter, done_.get(), 0));
  }
  std::size_t copy_nodes() const { return copies_.size(); }
  // The input the executable graph reads now.
  const float* reads() const { return in_; }

  // Points every copy node at the same offsets of `in` and `out`, one
  // cudaGraphExecMemcpyNodeSetParams1D each; returns the host ms.
  double point_at(const float* in, float* out) {
    const auto t0 = HostClock::now();
    for (const Copy& c : copies_) {
      if (c.h2d) {
        CHUNKPIPE_CUDA_TRY(cudaGraphExecMemcpyNodeSetParams1D(
            exec_, c.node, c.device, reinterpret_cast<const char*>(in) + c.offset, c.bytes, cudaMemcpyHostToDevice));
      } else {
        CHUNKPIPE_CUDA_TRY(cudaGraphExecMemcpyNodeSetParams1D(exec_, c.node, reinterpret_cast<char*>(out) + c.offset,
                                                              c.device, c.bytes, cudaMemcpyDeviceToHost));
      }
    }
    const double ms = ms_since(t0);
    in_ = in;
    out_ = out;
    return ms;
  }

  // Re-captures the loop over `in` and `out` and updates the executable
  // graph from it (cudaGraphExecUpdate: same topology, new parameters).
  // Returns the host ms of the capture and of the update.
  std::pair<double, double> update_from_capture(const float* in, float* out) {
    const float* const keep_in = h_.in;
    float* const keep_out = h_.out;
    h_.in = in;
    h_.out = out;
    const auto t0 = HostClock::now();
    cudaGraph_t fresh = capture();
    const double capture = ms_since(t0);
    h_.in = keep_in;
    h_.out = keep_out;
    cudaGraphExecUpdateResultInfo info{};
    const auto t1 = HostClock::now();
    const cudaError_t err = cudaGraphExecUpdate(exec_, fresh, &info);
    const double update = ms_since(t1);
    (void)cudaGraphDestroy(fresh);
    if (err != cudaSuccess || info.result != cudaGraphExecUpdateSuccess) {
      (void)cudaGetLastError();
      throw std::runtime_error(std::string("graphs_bench: cudaGraphExecUpdate of the hand graph failed: ") +
                               cudaGetErrorString(err) + ", result " + std::to_string(static_cast<int>(info.result)));
    }
    in_ = in;
    out_ = out;
    return {capture, update};
  }

 private:
  struct Copy {
    cudaGraphNode_t node;
    bool h2d;            // host array -> slot; else slot -> host array
    std::size_t offset;  // bytes into the host array
    void* device;        // the slot end, which never moves
    std::size_t bytes;
  };

  // Thread-local capture: chunkpipe's own threads may call CUDA meanwhile,
  // and a global capture would make their unsafe calls fail.
  cudaGraph_t capture() {
    CHUNKPIPE_CUDA_TRY(cudaStreamBeginCapture(origin_.get(), cudaStreamCaptureModeThreadLocal));
    CHUNKPIPE_CUDA_TRY(cudaEventRecord(fork_.get(), origin_.get()));
    for (auto& s : h_.s) CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(s.get(), fork_.get(), 0));
    h_.issue();
    h_.join(origin_.get());
    cudaGraph_t g = nullptr;
    CHUNKPIPE_CUDA_TRY(cudaStreamEndCapture(origin_.get(), &g));
    return g;
  }

  static std::uintptr_t address(const cudaPitchedPtr& p, const cudaPos& pos) {
    return reinterpret_cast<std::uintptr_t>(p.ptr) + pos.x + pos.y * p.pitch + pos.z * p.pitch * p.ysize;
  }

  // Every memcpy node of the captured graph, classified by which host array
  // it touches (not by its kind, which a captured copy need not keep).
  void collect_copies() {
    std::size_t n = 0;
    CHUNKPIPE_CUDA_TRY(cudaGraphGetNodes(graph_, nullptr, &n));
    std::vector<cudaGraphNode_t> all(n);
    CHUNKPIPE_CUDA_TRY(cudaGraphGetNodes(graph_, all.data(), &n));
    nodes = n;
    const std::uintptr_t in0 = reinterpret_cast<std::uintptr_t>(h_.in);
    const std::uintptr_t out0 = reinterpret_cast<std::uintptr_t>(h_.out);
    const std::size_t span = h_.total * sizeof(float);
    for (cudaGraphNode_t node : all) {
      cudaGraphNodeType type{};
      CHUNKPIPE_CUDA_TRY(cudaGraphNodeGetType(node, &type));
      if (type != cudaGraphNodeTypeMemcpy) continue;
      cudaMemcpy3DParms p{};
      CHUNKPIPE_CUDA_TRY(cudaGraphMemcpyNodeGetParams(node, &p));
      if (p.srcArray != nullptr || p.dstArray != nullptr || p.extent.height != 1 || p.extent.depth != 1) {
        throw std::runtime_error("graphs_bench: a captured copy of the hand loop is not a 1-D linear copy");
      }
      const std::uintptr_t src = address(p.srcPtr, p.srcPos), dst = address(p.dstPtr, p.dstPos);
      if (src >= in0 && src < in0 + span) {
        copies_.push_back({node, true, src - in0, reinterpret_cast<void*>(dst), p.extent.width});
      } else if (dst >= out0 && dst < out0 + span) {
        copies_.push_back({node, false, dst - out0, reinterpret_cast<void*>(src), p.extent.width});
      } else {
        throw std::runtime_error("graphs_bench: a captured copy of the hand loop touches neither host array");
      }
    }
    const std::size_t chunks = (h_.total + h_.chunk - 1) / h_.chunk;
    if (copies_.size() != 2 * chunks) {
      throw std::runtime_error("graphs_bench: the hand graph has " + std::to_string(copies_.size()) +
                               " copy nodes, not 2 per chunk (" + std::to_string(2 * chunks) + ")");
    }
  }

  HandLoop& h_;
  chunkpipe::Stream origin_;
  chunkpipe::Event fork_, done_;
  cudaGraph_t graph_ = nullptr;  // kept: its nodes name the executable graph's nodes
  cudaGraphExec_t exec_ = nullptr;
  std::vector<Copy> copies_;
  const float* in_;
  float* out_;
};

Variant hand_variant(HandLoop& h) {
  Variant v;
  v.name = "hand loop, streams";
  v.issue = [&h] { h.issue(); };
  v.join = [&h](cudaStream_t s) { h.join(s); };
  return v;
}

Variant graph_variant(HandGraph& g) {
  Variant v;
  v.name = "hand loop, captured graph";
  v.ran_on = "graph";
  v.issue = [&g] { g.launch(); };
  v.join = [&g](cudaStream_t s) { g.join(s); };
  return v;
}

// Comma-separated unsigned integers; false for anything else.
bool parse_list(const std::string& text, std::vector<std::size_t>& out) {
  out.clear();
  std::size_t pos = 0;
  while (true) {
    const std::size_t comma = text.find(',', pos);
    const std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    char* end = nullptr;
    const unsigned long long v = std::strtoull(item.c_str(), &end, 10);
    if (item.empty() || item[0] == '-' || *end != '\0') return false;
    out.push_back(static_cast<std::size_t>(v));
    if (comma == std::string::npos) return true;
    pos = comma + 1;
  }
}

constexpr const char* kUsage =
    "usage: graphs_bench [--rounds N] [--total-mib M] [--window-kib 64,256,...] [--fmas 0,512,4096] [--csv FILE]\n";

int parse(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto value = [&]() -> std::string { return example::next_value(argc, argv, i); };
    bool good = true;
    if (s == "--rounds") a.rounds = std::atoi(value().c_str());
    else if (s == "--total-mib") a.total_mib = std::strtoull(value().c_str(), nullptr, 10);
    else if (s == "--window-kib") good = parse_list(value(), a.window_kib);
    else if (s == "--fmas") good = parse_list(value(), a.fmas);
    else if (s == "--csv") a.csv = value();
    else if (s == "--help" || s == "-h") {
      std::printf("%s", kUsage);
      return 1;
    } else {
      std::fprintf(stderr, "graphs_bench: unknown option %s\n%s", s.c_str(), kUsage);
      return 2;
    }
    if (!good) {
      std::fprintf(stderr, "graphs_bench: %s wants a comma-separated list of non-negative integers\n", s.c_str());
      return 2;
    }
  }
  const bool windows_ok = std::all_of(a.window_kib.begin(), a.window_kib.end(), [](std::size_t k) { return k >= 1; });
  const bool fmas_ok = std::all_of(a.fmas.begin(), a.fmas.end(), [](std::size_t k) { return k <= 1000000; });
  if (a.rounds < 1 || a.total_mib == 0 || !windows_ok || !fmas_ok || a.fmas.empty()) {
    std::fprintf(stderr, "graphs_bench: --rounds >= 1, --total-mib >= 1, windows >= 1 KiB, 0 to 1000000 FMAs\n");
    return 2;
  }
  return 0;
}

// One measured figure. Ratios and values that do not apply are NaN and
// written as empty fields.
struct CsvRow {
  std::string section, variant;
  double size_kib;     // the window (grid, update) or the run (b2b)
  std::size_t fmas;
  std::string figure;  // what was measured, with its unit
  double median, min = kNaN, max = kNaN;
  double ratio = kNaN;
  std::string ratio_to;
  double ratio2 = kNaN;
  std::string ratio2_to;
  std::string executor, note;
};

std::string csv_number(double v) {
  if (std::isnan(v)) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4f", v);
  return buf;
}

std::string csv_text(const std::string& s) {
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

}  // namespace

int main(int argc, char** argv) try {
  Args a;
  if (const int rc = parse(argc, argv, a); rc != 0) return rc == 1 ? 0 : rc;
  if (const int rc = example::require_gpu("benchmark"); rc != 0) return rc;
  const cudaDeviceProp prop = example::current_gpu();
  int driver = 0, runtime = 0;
  CHUNKPIPE_CUDA_TRY(cudaDriverGetVersion(&driver));
  CHUNKPIPE_CUDA_TRY(cudaRuntimeGetVersion(&runtime));
  const std::size_t total = a.total_mib * kMiB / sizeof(float);
  // Two pairs with different data, so that a graph still reading A after
  // being pointed at B gives wrong output rather than the right numbers.
  chunkpipe::PinnedArray<float> in_a(total), out_a(total), in_b(total), out_b(total);
  for (std::size_t i = 0; i < total; ++i) {
    in_a[i] = static_cast<float>(i % 4093) / 4093.f - 0.5f;
    in_b[i] = static_cast<float>(i % 3989) / 3989.f - 0.25f;
  }
  const Pair A{"A", in_a.data(), out_a.data()}, B{"B", in_b.data(), out_b.data()};

  std::printf("graphs_bench on %s (driver %d, runtime %d): %zu MiB of float each way, pinned; %d rounds\n", prop.name,
              driver, runtime, a.total_mib, a.rounds);
  timing::EventClock clock;
  std::vector<CsvRow> csv;
  std::vector<float> ref;  // a cell's reference bits, reused (its capacity kept) across cells
  bool ok = true;

  // -- grid -----------------------------------------------------------------
  std::printf("\n== grid: one run of the whole array per pass; /hand and /graph are paired ratios to the hand loop on\n"
              "   streams and to the hand-captured graph; us/window and issue us/w per window of the array\n");
  std::printf("%9s %5s %-44s %9s %9s %9s %8s %8s %10s %11s  %s\n", "window", "fmas", "variant", "median", "min",
              "max", "/hand", "/graph", "us/window", "issue us/w", "ran on");
  for (std::size_t fm : a.fmas) {
    const Fma f{static_cast<int>(fm)};
    for (std::size_t wk : a.window_kib) {
      const std::size_t w = std::min(total, wk * kKiB / sizeof(float));
      const std::size_t chunks = (total + w - 1) / w;
      const std::string window = size_text(w * sizeof(float));
      const double size_kib = static_cast<double>(w * sizeof(float)) / kKiB;
      // Captured before any pipeline exists, so nothing else issues meanwhile.
      HandLoop hand(total, w, A.in, A.out, f);
      HandGraph graph(hand);
      std::vector<std::unique_ptr<CpRun>> cps;
      std::vector<Variant> vs;
      vs.push_back(hand_variant(hand));
      vs.push_back(graph_variant(graph));
      auto add = [&](const std::string& name, const chunkpipe::Options& o) {
        cps.push_back(std::make_unique<CpRun>(o, f));
        vs.push_back(pipe_variant(name, *cps.back(), A, total, total));
      };
      for (Executor e : {Executor::streams, Executor::graphs}) {
        add("chunkpipe slot_streams d4, " + std::string(chunkpipe::to_string(e)),
            {.chunk_elems = w, .depth = 4, .policy = Policy::slot_streams, .executor = e});
      }
      for (Executor e : {Executor::streams, Executor::graphs}) {
        // grain_elems = w keeps the window (no grains finer than it).
        add("chunkpipe stage_streams d3, " + std::string(chunkpipe::to_string(e)),
            {.chunk_elems = w, .depth = 3, .policy = Policy::stage_streams, .grain_elems = w, .executor = e});
      }
      {
        // The default may schedule a small window in larger units: the name
        // says what it chose.
        add("chunkpipe default", chunkpipe::Options{.chunk_elems = w});
        const chunkpipe::Geometry& g = cps.back()->pipe.geometry();
        const std::string unit = g.chunk_elems == w ? "" : ", " + size_text(g.chunk_elems * sizeof(float)) + " units";
        vs.back().name +=
            " (" + std::string(chunkpipe::to_string(g.policy)) + " d" + std::to_string(g.depth) + unit + ")";
      }

      // Checks, which are also each variant's warm-up: a graphs pipeline's
      // checked run builds its graph, so the timed runs replay it.
      ref.clear();
      for (Variant& v : vs) {
        ok = check(v.name + " at " + window + ", " + std::to_string(fm) + " FMAs", complete(v), A.in, A.out, total, f,
                   &ref) &&
             ok;
        if (v.cp != nullptr) {
          v.cp->before = v.cp->pipe.graph_stats();
          v.cp->first_ran_on = executors_of(v.cp->tickets);
        }
      }
      time_rounds(clock, vs, a.rounds);
      for (Variant& v : vs) {
        const example::Timing t = example::summarise(v.ms);
        const double vs_hand = paired_ratio(v, vs[0]), vs_graph = paired_ratio(v, vs[1]);
        const double per_window = t.median * 1000.0 / static_cast<double>(chunks);
        const double issue = median_of(v.issue_us) / static_cast<double>(chunks);
        const std::string on = ran_on(v);
        const std::string note = v.cp != nullptr ? note_of(v.cp->tickets) : "";
        std::printf("%9s %5zu %-44s %9.3f %9.3f %9.3f %8.3f %8.3f %10.2f %11.2f  %s%s\n", window.c_str(), fm,
                    v.name.c_str(), t.median, t.min, t.max, vs_hand, vs_graph, per_window, issue, on.c_str(),
                    note.empty() ? "" : (" [" + note + "]").c_str());
        csv.push_back({"grid", v.name, size_kib, fm, "pass_ms", t.median, t.min, t.max, vs_hand, "hand loop, streams",
                       vs_graph, "hand loop, captured graph", on, note});
        csv.push_back({"grid", v.name, size_kib, fm, "us_per_window", per_window, kNaN, kNaN, kNaN, "", kNaN, "", on,
                       note});
        csv.push_back({"grid", v.name, size_kib, fm, "issue_us_per_window", issue, kNaN, kNaN, kNaN, "", kNaN, "", on,
                       note});
      }

      // chunkpipe's graphs: what the checked run cost to build, and what
      // the timed runs did (all replays, if timing measured replay).
      for (const Variant& v : vs) {
        if (v.cp == nullptr || v.cp->pipe.options().executor == Executor::streams) continue;
        const chunkpipe::GraphStats& s0 = v.cp->before;
        const chunkpipe::GraphStats s1 = v.cp->pipe.graph_stats();
        // The default (executor auto) only when it used graphs at all.
        if (v.cp->pipe.options().executor == Executor::automatic && s1.built == 0) continue;
        const std::string timed = stats_delta(s0, s1);
        if (s0.built == 0) {
          std::printf("%15s %s: the checked run built no graph (%s); timed: %s\n", "", v.name.c_str(),
                      s0.last_note.empty() ? "no note" : s0.last_note.c_str(), timed.c_str());
        } else {
          std::printf("%15s %s: build %.3f ms, instantiate %.3f ms (checked run); timed: %s; last launch %.3f ms\n", "",
                      v.name.c_str(), s0.build_ms, s0.instantiate_ms, timed.c_str(), s1.launch_ms);
        }
        csv.push_back({"grid", v.name, size_kib, fm, "build_ms", s0.build_ms, kNaN, kNaN, kNaN, "", kNaN, "",
                       ran_on(v), "checked run; timed: " + timed});
        csv.push_back({"grid", v.name, size_kib, fm, "instantiate_ms", s0.instantiate_ms, kNaN, kNaN, kNaN, "", kNaN,
                       "", ran_on(v), "checked run; timed: " + timed});
        csv.push_back({"grid", v.name, size_kib, fm, "launch_ms", s1.launch_ms, kNaN, kNaN, kNaN, "", kNaN, "",
                       ran_on(v), "last timed run"});
      }

      // The hand graph pointed at other arrays: node by node, alternately at
      // B and back at A, `rounds` times (checked after the first and the
      // last), then from a re-capture over the pair it does not read now.
      std::vector<double> repoint;
      for (int r = 0; r < a.rounds; ++r) {
        const Pair& to = r % 2 == 0 ? B : A;
        repoint.push_back(graph.point_at(to.in, to.out));
        if (r == 0 || r == a.rounds - 1) {
          ok = check("hand graph re-pointed at " + std::string(to.name) + " at " + window, complete(vs[1]), to.in,
                     to.out, total, f, to.in == A.in ? &ref : nullptr) &&
               ok;
        }
      }
      const Pair& other = graph.reads() == A.in ? B : A;
      const auto [recapture_ms, exec_update_ms] = graph.update_from_capture(other.in, other.out);
      ok = check("hand graph updated from a capture over " + std::string(other.name) + " at " + window,
                 complete(vs[1]), other.in, other.out, total, f, other.in == A.in ? &ref : nullptr) &&
           ok;
      const example::Timing rp = example::summarise(repoint);
      std::printf("%15s hand graph: %zu nodes; capture %.3f ms, instantiate %.3f ms; re-point %zu copy nodes %.3f ms "
                  "(min %.3f, max %.3f); re-capture %.3f + cudaGraphExecUpdate %.3f = %.3f ms\n",
                  "", graph.nodes, graph.capture_ms, graph.instantiate_ms, graph.copy_nodes(), rp.median, rp.min,
                  rp.max, recapture_ms, exec_update_ms, recapture_ms + exec_update_ms);
      const std::string nodes = std::to_string(graph.nodes) + " nodes, " + std::to_string(graph.copy_nodes()) +
                                " copy nodes";
      const std::string hg = "hand loop, captured graph";
      csv.push_back({"grid", hg, size_kib, fm, "capture_ms", graph.capture_ms, kNaN, kNaN, kNaN, "", kNaN, "",
                     "graph", nodes});
      csv.push_back({"grid", hg, size_kib, fm, "instantiate_ms", graph.instantiate_ms, kNaN, kNaN, kNaN, "", kNaN, "",
                     "graph", nodes});
      csv.push_back({"grid", hg, size_kib, fm, "repoint_ms", rp.median, rp.min, rp.max, kNaN, "", kNaN, "", "graph",
                     "cudaGraphExecMemcpyNodeSetParams1D on every copy node"});
      csv.push_back({"grid", hg, size_kib, fm, "recapture_ms", recapture_ms, kNaN, kNaN, kNaN, "", kNaN, "", "graph",
                     "capture for cudaGraphExecUpdate"});
      csv.push_back({"grid", hg, size_kib, fm, "exec_update_ms", exec_update_ms, kNaN, kNaN, kNaN, "", kNaN, "",
                     "graph", "cudaGraphExecUpdate from the re-capture"});
    }
  }

  // -- update ---------------------------------------------------------------
  {
    const std::size_t fm = a.fmas.front();
    const Fma f{static_cast<int>(fm)};
    std::printf("\n== update: a graphs pipeline (slot_streams d4) run alternately over A and B, %zu FMAs; host ms\n"
                "   from GraphStats, run ms from CUDA events (the run's host work included)\n",
                fm);
    std::printf("%9s %10s %12s %10s %10s %10s %12s  %s\n", "window", "build", "instantiate", "update", "upd min",
                "upd max", "(b+i)/upd", "run ms: build / update / replay (medians)");
    for (std::size_t wk : {std::size_t{64}, std::size_t{1024}}) {
      const std::size_t w = std::min(total, wk * kKiB / sizeof(float));
      const std::string window = size_text(w * sizeof(float));
      const double size_kib = static_cast<double>(w * sizeof(float)) / kKiB;
      Pipe pipe(chunkpipe::Options{.chunk_elems = w, .depth = 4, .policy = Policy::slot_streams,
                                   .executor = Executor::graphs},
                chunkpipe::Map<Fma>{f});
      chunkpipe::GraphStats built{};
      std::vector<double> update_ms, build_run, update_run, replay_run;
      std::string other_runs;  // runs that neither built, updated nor replayed as planned
      // 1 run on A (builds), 2 x rounds alternating B, A, ... (each updates;
      // the last is on A), then `rounds` more on A (each replays).
      const int alternating = 1 + 2 * a.rounds;
      for (int r = 0; r < alternating + a.rounds; ++r) {
        const Pair& p = r < alternating && r % 2 == 1 ? B : A;
        const chunkpipe::GraphStats s0 = pipe.graph_stats();
        double ms = 0;
        ok = check("graphs pipeline run " + std::to_string(r) + " over " + p.name + " at " + window,
                   [&] {
                     ms = clock.run(pipe, chunkpipe::pinned(chunkpipe::host_span(p.in, total)),
                                    chunkpipe::pinned(chunkpipe::host_span(p.out, total)));
                   },
                   p.in, p.out, total, f, nullptr) &&
             ok;
        const chunkpipe::GraphStats s1 = pipe.graph_stats();
        const bool did_build = s1.built > s0.built, did_update = s1.updated > s0.updated;
        const bool did_replay = s1.replayed > s0.replayed;
        if (r == 0 && did_build) {
          built = s1;
          build_run.push_back(ms);
        } else if (r > 0 && r < alternating && did_update && !did_build) {
          update_ms.push_back(s1.update_ms);
          update_run.push_back(ms);
        } else if (r >= alternating && did_replay && !did_build && !did_update) {
          replay_run.push_back(ms);
        } else {
          other_runs += " run " + std::to_string(r) + ": " + stats_delta(s0, s1) +
                        (s1.last_note.empty() ? "" : " (" + s1.last_note + ")") + ";";
        }
      }
      const double build_total = built.build_ms + built.instantiate_ms;
      auto median_or_nan = [](const std::vector<double>& v) { return v.empty() ? kNaN : median_of(v); };
      const double upd = median_or_nan(update_ms);
      const example::Timing ut = update_ms.empty() ? example::Timing{kNaN, kNaN, kNaN} : example::summarise(update_ms);
      const double ratio = build_total / upd, ratio_build = built.build_ms / upd;
      std::printf("%9s %10.3f %12.3f %10.3f %10.3f %10.3f %12.1f  %.3f / %.3f / %.3f\n", window.c_str(),
                  built.build_ms, built.instantiate_ms, ut.median, ut.min, ut.max, ratio, median_or_nan(build_run),
                  median_or_nan(update_run), median_or_nan(replay_run));
      std::printf("%9s (build + instantiate) / update = %.1fx, build / update = %.1fx (target: >= 10x): %s; "
                  "%zu of %d runs updated, %zu of %d replayed\n",
                  "", ratio, ratio_build, std::isnan(ratio) ? "not measured" : (ratio >= 10 ? "met" : "NOT met"),
                  update_ms.size(), alternating - 1, replay_run.size(), a.rounds);
      if (!other_runs.empty()) std::printf("%9s not as planned:%s\n", "", other_runs.c_str());
      const std::string n = "slot_streams d4, graphs";
      csv.push_back({"update", n, size_kib, fm, "build_ms", built.build_ms, kNaN, kNaN, kNaN, "", kNaN, "", "graphs",
                     "GraphStats after the first run"});
      csv.push_back({"update", n, size_kib, fm, "instantiate_ms", built.instantiate_ms, kNaN, kNaN, kNaN, "", kNaN, "",
                     "graphs", "GraphStats after the first run"});
      csv.push_back({"update", n, size_kib, fm, "update_ms", ut.median, ut.min, ut.max, ratio,
                     "(build_ms + instantiate_ms) / update_ms", ratio_build, "build_ms / update_ms", "graphs",
                     std::to_string(update_ms.size()) + " updating runs"});
      const std::pair<const char*, const std::vector<double>*> runs[] = {
          {"build_run_ms", &build_run}, {"update_run_ms", &update_run}, {"replay_run_ms", &replay_run}};
      for (const auto& [figure, v] : runs) {
        if (v->empty()) continue;
        const example::Timing t = example::summarise(*v);
        csv.push_back({"update", n, size_kib, fm, figure, t.median, t.min, t.max, kNaN, "", kNaN, "", "graphs",
                       std::to_string(v->size()) + " runs"});
      }
    }
  }

  // -- b2b ------------------------------------------------------------------
  {
    const std::size_t run_elems = std::min(total, kMiB / sizeof(float));
    const std::size_t n_runs = (total + run_elems - 1) / run_elems;
    std::printf("\n== b2b: %zu run_async of %s back to back over the array, then wait for all; Options{} but the "
                "executor\n",
                n_runs, size_text(run_elems * sizeof(float)).c_str());
    std::printf("%5s %-34s %9s %9s %9s %10s %12s  %s\n", "fmas", "variant", "median", "min", "max", "/streams",
                "issue us/run", "ran on; graph executor over the timed passes");
    for (std::size_t fm : a.fmas) {
      const Fma f{static_cast<int>(fm)};
      std::vector<std::unique_ptr<CpRun>> cps;
      std::vector<Variant> vs;
      const std::pair<const char*, Executor> execs[] = {{"Options{.executor = streams}", Executor::streams},
                                                        {"Options{.executor = graphs}", Executor::graphs},
                                                        {"Options{} (executor auto)", Executor::automatic}};
      for (const auto& [name, e] : execs) {
        cps.push_back(std::make_unique<CpRun>(chunkpipe::Options{.executor = e}, f));
        vs.push_back(pipe_variant(name, *cps.back(), A, total, run_elems));
      }
      ref.clear();
      for (Variant& v : vs) {
        ok = check(v.name + " back to back, " + std::to_string(fm) + " FMAs", complete(v), A.in, A.out, total, f,
                   &ref) &&
             ok;
        v.cp->before = v.cp->pipe.graph_stats();
        v.cp->first_ran_on = executors_of(v.cp->tickets);
      }
      time_rounds(clock, vs, a.rounds);
      for (Variant& v : vs) {
        const example::Timing t = example::summarise(v.ms);
        const double vs_streams = paired_ratio(v, vs[0]);
        const double issue = median_of(v.issue_us) / static_cast<double>(n_runs);
        const chunkpipe::GraphStats s1 = v.cp->pipe.graph_stats();
        const std::string on = ran_on(v);
        std::string note = stats_delta(v.cp->before, s1) + "; last update " + csv_number(s1.update_ms) +
                           " ms, last launch " + csv_number(s1.launch_ms) + " ms";
        if (const std::string why = note_of(v.cp->tickets); !why.empty()) note += "; " + why;
        std::printf("%5zu %-34s %9.3f %9.3f %9.3f %10.3f %12.2f  %s; %s\n", fm, v.name.c_str(), t.median, t.min,
                    t.max, vs_streams, issue, on.c_str(), note.c_str());
        csv.push_back({"b2b", v.name, static_cast<double>(run_elems * sizeof(float)) / kKiB, fm, "pass_ms", t.median,
                       t.min, t.max, vs_streams, "executor streams", kNaN, "", on, note});
        csv.push_back({"b2b", v.name, static_cast<double>(run_elems * sizeof(float)) / kKiB, fm, "issue_us_per_run",
                       issue, kNaN, kNaN, kNaN, "", kNaN, "", on, note});
      }
      const double g = paired_ratio(vs[1], vs[0]), au = paired_ratio(vs[2], vs[0]);
      std::printf("%5s graphs / streams = %.3f, auto / streams = %.3f (target: both <= 1.00): %s\n", "", g, au,
                  g <= 1.0 && au <= 1.0 ? "met" : "NOT met");
    }
  }

  if (FILE* fp = std::fopen(a.csv.c_str(), "w")) {
    std::fprintf(fp, "section,variant,size_kib,fmas,figure,median,min,max,ratio,ratio_to,ratio2,ratio2_to,executor,"
                     "note\n");
    for (const CsvRow& r : csv) {
      std::fprintf(fp, "%s,%s,%.0f,%zu,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n", r.section.c_str(), csv_text(r.variant).c_str(),
                   r.size_kib, r.fmas, r.figure.c_str(), csv_number(r.median).c_str(), csv_number(r.min).c_str(),
                   csv_number(r.max).c_str(), csv_number(r.ratio).c_str(), csv_text(r.ratio_to).c_str(),
                   csv_number(r.ratio2).c_str(), csv_text(r.ratio2_to).c_str(), csv_text(r.executor).c_str(),
                   csv_text(r.note).c_str());
    }
    std::fclose(fp);
    std::printf("\nCSV: %s\n", a.csv.c_str());
  } else {
    std::fprintf(stderr, "graphs_bench: cannot write %s\n", a.csv.c_str());
    ok = false;
  }
  if (!ok) std::fprintf(stderr, "graphs_bench: FAILED: some output was wrong (see FAIL lines above)\n");
  return ok ? EXIT_SUCCESS : EXIT_FAILURE;
} catch (const std::exception& e) {
  std::fprintf(stderr, "graphs_bench: %s\n", e.what());
  return EXIT_FAILURE;
}
