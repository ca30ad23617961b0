// SPDX-License-Identifier: MIT
//
// spread_bench: SpreadPipeline (Options::devices) against one pipeline, in
// one process, over pinned float each way (1 and 4 GiB by default; with
// --pageable, the same from pageable std::vectors):
//
//   plain        ChunkedPipeline, Options{}
//   spread x1    SpreadPipeline over the current device once: what cutting
//                a run into pieces costs
//   same twice   SpreadPipeline over the current device listed twice (each
//                member its own slots, streams and host threads): issue
//                13's "within 3% of a plain pipeline"
//   N GPUs       SpreadPipeline over devices 0..N-1, for every N from 2 to
//                the devices present (rows say "not present" otherwise)
//   plain, 8 q   the plain pipeline's run cut into 8 runs queued with
//                run_async (back-to-back runs overlap on its schedule)
//   twice, 8 q   the same 8 runs, and 16 (64 MiB each at 1 GiB), queued
//   twice, 16 q  on the device listed twice (SpreadPipeline::run_async:
//                a queued run of ranges continues the runs before it);
//                their "vs plain" is against "same twice", one spread run
//                of the same bytes (issue 34: at least 0.97)
//   filter ...   a Filter keeping the positive half of the input, packed
//                into one output: plain, spread x1 and the device twice
//                (their pieces column adds how many packed in place);
//                checked against the host's own filter to the bit, vs
//                the plain filter, floor from the bytes that cross
//   reduce ...   a Reduce (a float sum) of the input: plain, spread x1
//                and the device twice; only the input crosses, so the
//                floor is B/h2d; each spread's sum checked against the
//                plain pipeline's to the bit (and that one against the
//                host's double sum), vs the plain reduce
//   filter 2x,   the Filter cut into 16 runs queued on the device listed
//     16 q       twice, each packing its part of the input into the same
//                part of the output: vs "filter twice"; each run's count
//                and elements checked against the host's filter of its part
//   reduce 2x,   the same Reduce cut into 16 runs queued on the device
//     16 q       listed twice (a fold of ranges continues the runs before
//                it): vs "reduce twice", one spread Reduce of the same
//                bytes; each run's sum checked against one pipeline's sum
//                of the same part, to the bit
//   sink twice   one spread run on the device listed twice into a Sink
//                that keeps nothing (it checks every 1021st element
//                against the closed form): vs "same twice"
//   sink 2x,     the same cut into 16 runs queued at once, each with its
//     16 q       own Sink: vs "sink twice" (issue 34: queued runs with
//                Sinks continue the runs before them)
//   host memcpy  (pageable only) what the host's memory does with every
//                core copying B from the pageable input into pinned memory
//                and B from pinned memory into the pageable output at
//                once: the limit staged runs are judged against ("of host"
//                column: host memcpy ms / the row's ms)
//
// The floor of each size is max(B/h2d, B/d2h, 2B/both) from measure_link on
// the current device (every GPU's link is measured and printed). Each
// variant is checked against the closed form first (outputs poisoned), then
// timed in interleaved rounds on the host clock (run() blocks); ratios are
// medians of per-round ratios. "predicted" is simulate_spread's figure
// for every spread row: one H200 machine per member with its GPU's
// measured link (members that list one device share it: SpreadShape::
// devices), the queued rows as their runs (SpreadShape::runs), the filter
// rows bringing back 4 bytes times the kept share per element, rounded,
// the reduce rows nothing; the kernel's time is left out, which at the default 64 FMAs is far under
// the copies'; pageable rows add the host's memcpy bound, --host-gbps,
// default 50 GB/s for both directions together, DEVICE.md. Prints a
// table; writes CSV.
#include <chunkpipe/pipeline.cuh>
#include <chunkpipe/simulate.hpp>

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
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "hand_loop.hpp"
#include "probes/probe.hpp"

namespace {

using probe::Fma;
using bench::ClosedForm;

struct Args {
  std::vector<std::size_t> gib{1, 4};
  int rounds = 5;
  int fmas = 64;
  bool pageable = false;
  double host_gbps = 50.0;  // the host's memcpy, both directions together (DEVICE.md, 2026-12-01)
  std::string csv = "spread_bench.csv";
  bool profile_filter = false;  // --profile-filter: print where a Filter spread's time goes, then stop
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

// Part k of `span` cut into `runs` runs of equal length (the last one
// shorter): how the queued rows cut the run.
template <class T>
chunkpipe::HostSpan<T> run_part(chunkpipe::HostSpan<T> span, std::size_t runs, std::size_t k) {
  const std::size_t len = (span.size + runs - 1) / runs;
  const std::size_t first = std::min(span.size, k * len);
  return chunkpipe::HostSpan<T>{span.data + first, std::min(len, span.size - first), span.memory};
}

// A Sink that keeps nothing, as a socket or another process would take
// the data: it checks every 1021st element it is handed against the closed
// form of the input at that offset (`in`: its run's input), and counts
// the elements. One run's Sink is called one window at a time, in order.
struct CheckingSink {
  const float* in;
  const ClosedForm* closed;
  std::atomic<std::size_t>* got;
  std::atomic<std::size_t>* wrong;
  void operator()(std::size_t, std::size_t offset, ::cuda::std::span<const float> d) const {
    std::size_t bad = 0;
    for (std::size_t i = 0; i < d.size(); i += 1021) bad += closed->matches(in[offset + i], d[i]) ? 0 : 1;
    if (!d.empty() && !closed->matches(in[offset + d.size() - 1], d[d.size() - 1])) ++bad;
    wrong->fetch_add(bad);
    got->fetch_add(d.size());
  }
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "spread_bench: %s needs a value\n", s.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (s == "--gib") {
      a.gib = parse_list(next());
    } else if (s == "--rounds") {
      a.rounds = std::atoi(next());
    } else if (s == "--fmas") {
      a.fmas = std::atoi(next());
    } else if (s == "--pageable") {
      a.pageable = true;
    } else if (s == "--host-gbps") {
      a.host_gbps = std::atof(next());
    } else if (s == "--csv") {
      a.csv = next();
    } else if (s == "--profile-filter") {
      a.profile_filter = true;
    } else {
      std::fprintf(stderr,
                   "usage: spread_bench [--gib 1,4] [--rounds 5] [--fmas 64] [--pageable] [--host-gbps 50] [--csv FILE] [--profile-filter]\n");
      std::exit(s == "--help" || s == "-h" ? 0 : 2);
    }
  }
  if (a.rounds < 1 || a.gib.empty() || !(a.host_gbps > 0)) {
    std::fprintf(stderr, "spread_bench: --rounds must be at least 1, --gib name a size and --host-gbps be above 0\n");
    std::exit(2);
  }
  return a;
}

struct Positive {
  CHUNKPIPE_HOST_DEVICE bool operator()(float v) const { return v > 0.0f; }
};

struct Plus {
  CHUNKPIPE_HOST_DEVICE float operator()(float a, float b) const { return a + b; }
};

using Pipe = chunkpipe::ChunkedPipeline<chunkpipe::Map<Fma>>;
using Spread = chunkpipe::SpreadPipeline<chunkpipe::Map<Fma>>;
using FilterPipe = chunkpipe::ChunkedPipeline<chunkpipe::Filter<Positive>>;
using FilterSpread = chunkpipe::SpreadPipeline<chunkpipe::Filter<Positive>>;
using ReducePipe = chunkpipe::ChunkedPipeline<chunkpipe::Reduce<float, Plus>>;
using ReduceSpread = chunkpipe::SpreadPipeline<chunkpipe::Reduce<float, Plus>>;

// The "8 q" rows cut a run into this many runs, queued at once.
constexpr std::size_t queued_runs = 8;

struct Variant {
  std::string name;
  std::function<void()> run;
  std::vector<double> ms;
  std::string pieces;  // what the last spread run gave each member
  double predicted = -1;  // simulate_spread's ms; -1: not modelled (a plain pipeline's rows)
  std::size_t base = 0;   // the variant "vs plain" compares with
  bool filter = false;    // checked against the host's filter, not the closed form
  bool reduce = false;    // checked against the plain reduce's bits; floor from the input alone
  bool checked = true;    // false: times the host alone, writes nothing of the run
  // Its own check, run after it once (the number of wrong results), in
  // place of the reduce/filter/closed-form ones.
  std::function<std::size_t()> check = nullptr;
};

// Every core copies its share of `in` into `a` and of `b` into `out`, at once.
void host_memcpy(const float* in, float* a, const float* b, float* out, std::size_t n) {
  const std::size_t threads = std::max(2u, std::thread::hardware_concurrency());
  const std::size_t share = (n + threads - 1) / threads;
  std::vector<std::thread> ts;
  for (std::size_t t = 0; t < threads; ++t) {
    ts.emplace_back([=] {
      const std::size_t first = std::min(n, t * share), len = std::min(share, n - first);
      std::memcpy(a + first, in + first, len * sizeof(float));
      std::memcpy(out + first, b + first, len * sizeof(float));
    });
  }
  for (std::thread& t : ts) t.join();
}

std::string pieces_of(const chunkpipe::SpreadSummary& sum) {
  std::string p;
  for (std::size_t k = 0; k < sum.pieces.size(); ++k) p += (k ? "/" : "") + std::to_string(sum.pieces[k]);
  return p;
}

// Waits for queued runs in order, handing each run's value to `got`, and
// says what their pieces came to on each member, as pieces_of() does.
template <class R, class Got>
std::string wait_queued(std::vector<chunkpipe::SpreadTicket<R>>& ts, Got got) {
  chunkpipe::SpreadSummary all;
  for (auto& t : ts) {
    got(t.get());
    const chunkpipe::SpreadSummary one = t.summary();
    if (all.pieces.size() < one.pieces.size()) all.pieces.resize(one.pieces.size(), 0);
    for (std::size_t m = 0; m < one.pieces.size(); ++m) all.pieces[m] += one.pieces[m];
  }
  return pieces_of(all);
}

double wall_ms(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double paired(const Variant& a, const Variant& b) {
  std::vector<double> r;
  for (std::size_t i = 0; i < a.ms.size() && i < b.ms.size(); ++i) r.push_back(a.ms[i] / b.ms[i]);
  return median(r);
}

// Each kind's ops of one member (or of every member, m < 0): count, mean
// and busy time (ops of one kind overlapping counted once).
void print_kinds(const chunkpipe::Report& rep, int m) {
  for (chunkpipe::OpKind k : {chunkpipe::OpKind::host_in, chunkpipe::OpKind::h2d, chunkpipe::OpKind::stage,
                              chunkpipe::OpKind::d2h, chunkpipe::OpKind::host_out}) {
    chunkpipe::Report one = rep;
    one.ops.clear();
    for (const chunkpipe::TimedOp& op : rep.ops) {
      if (op.kind == k && (m < 0 || op.device == m)) one.ops.push_back(op);
    }
    double sum = 0;
    for (const chunkpipe::TimedOp& op : one.ops) sum += op.end_ms - op.start_ms;
    const std::string kind(chunkpipe::to_string(k));
    std::printf("  member %2d  %-8s %5zu ops, mean %.3f ms, busy %.2f ms\n", m, kind.c_str(),
                one.ops.size(), one.ops.empty() ? 0.0 : sum / static_cast<double>(one.ops.size()),
                chunkpipe::busy_ms(one, k));
  }
}

// --profile-filter: where a Filter spread's time goes (issue 34 point 3).
// Pinned input and output, the positive half kept; one pipeline, a spread
// over this device and over it twice, each run once to warm and once
// profiled, checked against the host's filter. Prints each report, its
// timeline and each member's busy time a kind; writes no CSV.
bool profile_filter(std::size_t gib, int dev) {
  const std::size_t n = (gib << 30) / sizeof(float);
  chunkpipe::PinnedArray<float> in(n), out(n);
  for (std::size_t i = 0; i < n; ++i) in.data()[i] = static_cast<float>((i * 2654435761u) % 8191) / 8191.0f - 0.5f;
  std::vector<float> kept;
  for (std::size_t i = 0; i < n; ++i) {
    if (Positive{}(in.data()[i])) kept.push_back(in.data()[i]);
  }
  auto in_span = chunkpipe::host_span(static_cast<const float*>(in.data()), n, chunkpipe::Memory::pinned);
  auto out_span = chunkpipe::host_span(out.data(), n, chunkpipe::Memory::pinned);
  chunkpipe::Options o;
  o.profile = true;
  bool ok = true;
  auto check = [&](const char* what, std::size_t got) {
    if (got != kept.size() || std::memcmp(out.data(), kept.data(), kept.size() * sizeof(float)) != 0) {
      std::printf("spread_bench: %s wrote a wrong filter\n", what);
      ok = false;
    }
  };
  {
    FilterPipe plain(o, chunkpipe::filter(Positive{}));
    plain.run(in_span, out_span);
    std::memset(out.data(), 0xFF, n * sizeof(float));
    std::size_t got = 0;
    const double ms = wall_ms([&] { got = plain.run(in_span, out_span); });
    check("filter plain", got);
    const chunkpipe::Report rep = plain.report();
    std::printf("== profiled filter plain, %zu GiB pinned: %.2f ms wall\n", gib, ms);
    std::cout << rep << "\n" << chunkpipe::ascii_timeline(rep, 160) << "\n";
    print_kinds(rep, -1);
  }
  for (const bool twice : {false, true}) {
    chunkpipe::Options so = o;
    so.devices = twice ? std::vector<int>{dev, dev} : std::vector<int>{dev};
    FilterSpread s(so, chunkpipe::filter(Positive{}));
    s.run(in_span, out_span);
    std::memset(out.data(), 0xFF, n * sizeof(float));
    std::size_t got = 0;
    const double ms = wall_ms([&] { got = s.run(in_span, out_span); });
    check(twice ? "filter twice" : "filter x1", got);
    const chunkpipe::Report rep = s.report();
    std::printf("== profiled filter %s, %zu GiB pinned: %.2f ms wall, pieces %s\n", twice ? "twice" : "x1", gib, ms,
                pieces_of(s.last_summary()).c_str());
    std::cout << rep << "\n" << chunkpipe::ascii_timeline(rep, 160) << "\n";
    for (int m = 0; m < (twice ? 2 : 1); ++m) print_kinds(rep, m);
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("spread_bench: no CUDA device; nothing measured\n");
    return 0;
  }
  int dev = 0;
  CHUNKPIPE_CUDA_TRY(cudaGetDevice(&dev));
  std::printf("spread_bench: %d device(s); pinned%s; %d FMAs an element; %d rounds\n", count,
              args.pageable ? " and pageable" : "", args.fmas, args.rounds);
  std::vector<chunkpipe::LinkModel> links;
  for (int d = 0; d < count; ++d) {
    links.push_back(chunkpipe::measure_link(d));
    std::printf("  device %d link: h2d %.1f GB/s, d2h %.1f GB/s, both %.1f GB/s\n", d, links[d].h2d_gbps,
                links[d].d2h_gbps, links[d].both_gbps);
  }
  if (args.pageable) {
    // What a spread's one staging team is sized by (Options::host_threads
    // left at 0): the fewest threads within 5% of the best rate here.
    const chunkpipe::HostCopyRates hc = chunkpipe::measure_host_copy();
    std::printf("  host memcpy (measure_host_copy, 64 MiB), threads: GB/s:");
    for (const chunkpipe::HostCopyRate& r : hc.rates) std::printf(" %d: %.1f", r.threads, r.gbps);
    std::printf("; a spread's team: %d threads\n", hc.team());
  }
  const chunkpipe::LinkModel& link = links[static_cast<std::size_t>(dev)];
  const Fma f{args.fmas};
  const ClosedForm closed(args.fmas);
  if (args.profile_filter) {
    bool ok = true;
    for (const std::size_t gib : args.gib) ok = profile_filter(gib, dev) && ok;
    std::printf("spread_bench: %s\n", ok ? "every profiled filter checked" : "WRONG RESULTS");
    return ok ? 0 : 1;
  }

  std::FILE* csv = std::fopen(args.csv.c_str(), "w");
  if (csv) std::fprintf(csv, "gib,memory,variant,median_ms,floor_ms,of_floor,vs_plain,predicted_ms,of_host,pieces\n");
  std::printf("\n%-5s %-9s %-14s %10s %10s %9s %9s %10s %8s  %s\n", "GiB", "memory", "variant", "median ms", "floor ms",
              "of floor", "vs plain", "predicted", "of host", "pieces per member");

  bool ok = true;
  for (const std::size_t gib : args.gib) {
    const std::size_t n = (gib << 30) / sizeof(float);
    const double bytes = static_cast<double>(n) * sizeof(float);
    const double floor_ms_map = std::max({bytes / (link.h2d_gbps * 1e6), bytes / (link.d2h_gbps * 1e6),
                                          2 * bytes / (link.both_gbps * 1e6)});
    for (const bool pageable : {false, true}) {
      if (pageable && !args.pageable) continue;
      std::unique_ptr<chunkpipe::PinnedArray<float>> pin_in, pin_out;
      std::vector<float> pg_in, pg_out;
      float* in = nullptr;
      float* out = nullptr;
      if (pageable) {
        pg_in.resize(n);
        pg_out.resize(n);
        in = pg_in.data();
        out = pg_out.data();
      } else {
        pin_in = std::make_unique<chunkpipe::PinnedArray<float>>(n);
        pin_out = std::make_unique<chunkpipe::PinnedArray<float>>(n);
        in = pin_in->data();
        out = pin_out->data();
      }
      for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<float>((i * 2654435761u) % 8191) / 8191.0f - 0.5f;
      const chunkpipe::Memory mem = pageable ? chunkpipe::Memory::pageable : chunkpipe::Memory::pinned;
      auto in_span = chunkpipe::host_span(static_cast<const float*>(in), n, mem);
      auto out_span = chunkpipe::host_span(out, n, mem);

      Pipe plain(chunkpipe::Options{}, chunkpipe::Map<Fma>{f});
      std::vector<std::unique_ptr<Spread>> spreads;
      std::vector<Variant> vs;
      vs.push_back({"plain", [&] { plain.run(in_span, out_span); }, {}, ""});
      // simulate_spread's figure for a spread over `devices` of the runs
      // `runs` (element counts), bringing back `out_bytes` an element.
      auto predict = [&](const chunkpipe::Geometry& g, std::size_t piece, const std::vector<int>& devices,
                         std::vector<std::size_t> runs, std::size_t out_bytes) {
        std::vector<chunkpipe::Machine> machines;
        for (int d : devices) {
          machines.push_back(chunkpipe::machines::h200_pcie5());
          machines.back().link = links[static_cast<std::size_t>(d)];
        }
        const chunkpipe::Workload w = chunkpipe::map_workload(n, g.chunk_elems, 0.0, 4, out_bytes);
        chunkpipe::SpreadShape shape;
        shape.runs = std::move(runs);
        shape.devices = devices;
        shape.staged_bytes_per_elem = pageable ? 4.0 + static_cast<double>(out_bytes) : 0.0;
        shape.host_memcpy_gbps = args.host_gbps;
        return chunkpipe::simulate_spread(g.policy, g.depth, w, machines, piece, shape).makespan_ms;
      };
      auto add_spread = [&](const std::string& name, std::vector<int> devices) {
        chunkpipe::Options o;
        o.devices = devices;
        spreads.push_back(std::make_unique<Spread>(o, chunkpipe::Map<Fma>{f}));
        Spread* s = spreads.back().get();
        vs.push_back({name, {}, {}, ""});
        vs.back().predicted = predict(s->member(0).geometry(), s->piece_elems(), devices, {n}, 4);
        const std::size_t index = vs.size() - 1;  // vs may grow: refer to it by index
        vs.back().run = [&vs, s, index, &in_span, &out_span] { vs[index].pieces = pieces_of(s->run(in_span, out_span)); };
      };
      add_spread("spread x1", {dev});
      add_spread("same twice", {dev, dev});
      if (pageable) std::printf("  (pageable rows: the spreads' one copy team has %d threads)\n", spreads.front()->copy_threads());
      for (int k = 2; k <= count; ++k) {
        std::vector<int> list;
        for (int d = 0; d < k; ++d) list.push_back(d);
        add_spread(std::to_string(k) + " GPUs", list);
      }
      // The run cut into queued_runs runs queued at once: one pipeline's
      // back-to-back runs, then the same on the device listed twice.
      vs.push_back({"plain, 8 q", [&] {
                      std::vector<chunkpipe::RunTicket> ts;
                      for (std::size_t k = 0; k < queued_runs; ++k) ts.push_back(plain.run_async(run_part(in_span, queued_runs, k), run_part(out_span, queued_runs, k)));
                      for (auto& t : ts) t.wait();
                    },
                    {},
                    ""});
      // The same cut into 8 and into 16 runs (64 MiB each at 1 GiB, issue
      // 34's measure) queued on the device listed twice: queued spread
      // runs continue into each other, so each row is compared with one
      // spread run of the same bytes ("same twice").
      std::size_t same_twice = 0;
      for (std::size_t i = 0; i < vs.size(); ++i) {
        if (vs[i].name == "same twice") same_twice = i;
      }
      for (const std::size_t runs : {queued_runs, 2 * queued_runs}) {
        chunkpipe::Options o;
        o.devices = {dev, dev};
        spreads.push_back(std::make_unique<Spread>(o, chunkpipe::Map<Fma>{f}));
        Spread* s = spreads.back().get();
        const std::size_t index = vs.size();
        vs.push_back({"twice, " + std::to_string(runs) + " q", [&vs, s, index, runs, &in_span, &out_span] {
                        std::vector<chunkpipe::SpreadTicket<chunkpipe::SpreadSummary>> ts;
                        for (std::size_t k = 0; k < runs; ++k) ts.push_back(s->run_async(run_part(in_span, runs, k), run_part(out_span, runs, k)));
                        vs[index].pieces = wait_queued(ts, [](const chunkpipe::SpreadSummary&) {});
                      },
                      {},
                      ""});
        vs.back().base = same_twice;
        std::vector<std::size_t> lengths;
        for (std::size_t k = 0; k < runs; ++k) lengths.push_back(run_part(in_span, runs, k).size);
        vs.back().predicted = predict(s->member(0).geometry(), s->piece_elems(), {dev, dev}, lengths, 4);
      }
      // The same bytes into Sinks that check and keep nothing (CheckingSink):
      // one spread run, and the run cut into 16 runs queued at once, each
      // with its own Sink (a run into a Sink continues the runs before it,
      // and its Sink is fed once they are complete): vs "sink twice".
      std::atomic<std::size_t> sink_got{0}, sink_wrong{0};
      auto sink_check = [&sink_got, &sink_wrong, n] {
        return sink_wrong.load() + (sink_got.load() == n ? 0 : 1);
      };
      std::size_t sink_twice = 0;
      for (const std::size_t runs : {std::size_t{1}, 2 * queued_runs}) {
        chunkpipe::Options o;
        o.devices = {dev, dev};
        spreads.push_back(std::make_unique<Spread>(o, chunkpipe::Map<Fma>{f}));
        Spread* s = spreads.back().get();
        const std::size_t index = vs.size();
        vs.push_back({runs == 1 ? std::string("sink twice") : "sink 2x, " + std::to_string(runs) + " q",
                      [&, s, index, runs] {
                        sink_got = 0;
                        sink_wrong = 0;
                        std::vector<chunkpipe::SpreadTicket<chunkpipe::SpreadSummary>> ts;
                        for (std::size_t k = 0; k < runs; ++k) {
                          const auto part = run_part(in_span, runs, k);
                          ts.push_back(s->run_async(part, chunkpipe::sink<float>(CheckingSink{part.data, &closed, &sink_got, &sink_wrong})));
                        }
                        vs[index].pieces = wait_queued(ts, [](const chunkpipe::SpreadSummary&) {});
                      },
                      {},
                      ""});
        vs.back().check = sink_check;
        if (runs == 1) {
          sink_twice = index;
          vs.back().base = same_twice;
        } else {
          vs.back().base = sink_twice;
        }
        std::vector<std::size_t> lengths;
        for (std::size_t k = 0; k < runs; ++k) lengths.push_back(run_part(in_span, runs, k).size);
        vs.back().predicted = predict(s->member(0).geometry(), s->piece_elems(), {dev, dev}, lengths, 4);
      }
      // A Filter of the input's positive half, packed into out: what only
      // the kept elements cost to bring back, plain and spread.
      std::vector<float> kept;
      for (std::size_t i = 0; i < n; ++i) {
        if (Positive{}(in[i])) kept.push_back(in[i]);
      }
      const std::size_t first_filter = vs.size();
      FilterPipe plain_filter(chunkpipe::Options{}, chunkpipe::filter(Positive{}));
      std::size_t filtered = 0;  // what the latest filter run wrote
      vs.push_back({"filter plain", [&] { filtered = plain_filter.run(in_span, out_span); }, {}, ""});
      std::vector<std::unique_ptr<FilterSpread>> filter_spreads;
      for (const bool twice : {false, true}) {
        chunkpipe::Options o;
        o.devices = twice ? std::vector<int>{dev, dev} : std::vector<int>{dev};
        filter_spreads.push_back(std::make_unique<FilterSpread>(o, chunkpipe::filter(Positive{})));
        FilterSpread* s = filter_spreads.back().get();
        const std::size_t index = vs.size();
        vs.push_back({twice ? "filter twice" : "filter x1", [&vs, s, index, &filtered, &in_span, &out_span] {
                        filtered = s->run(in_span, out_span);
                        // And how many pieces packed straight into place
                        // (the others went through a piece buffer).
                        const chunkpipe::SpreadSummary sum = s->last_summary();
                        vs[index].pieces = pieces_of(sum) + " (" + std::to_string(sum.in_place) + " in place)";
                      },
                      {},
                      ""});
        const auto kept_bytes = static_cast<std::size_t>(
            std::lround(4.0 * static_cast<double>(kept.size()) / static_cast<double>(n)));
        vs.back().predicted = predict(s->member(0).geometry(), s->piece_elems(), o.devices, {n}, kept_bytes);
      }
      for (std::size_t i = first_filter; i < vs.size(); ++i) {
        vs[i].base = first_filter;
        vs[i].filter = true;
      }
      // The Filter cut into 16 runs queued on the device listed twice, each
      // packing its part of the input into the same part of the output: a
      // count into ranges continues the runs before it (at most two open
      // with piece buffers of their own), so it is compared with one spread
      // Filter of the same bytes ("filter twice"); each run's count and
      // elements checked against the host's filter of its part.
      std::vector<std::size_t> part_counts;  // the queued Filter runs' latest counts
      {
        const std::size_t runs = 2 * queued_runs;
        chunkpipe::Options o;
        o.devices = {dev, dev};
        filter_spreads.push_back(std::make_unique<FilterSpread>(o, chunkpipe::filter(Positive{})));
        FilterSpread* s = filter_spreads.back().get();
        const std::size_t index = vs.size();
        vs.push_back({"filter 2x, 16 q", [&vs, s, index, runs, &in_span, &out_span, &part_counts] {
                        std::vector<chunkpipe::SpreadTicket<std::size_t>> ts;
                        for (std::size_t k = 0; k < runs; ++k) ts.push_back(s->run_async(run_part(in_span, runs, k), run_part(out_span, runs, k)));
                        part_counts.clear();
                        vs[index].pieces = wait_queued(ts, [&](auto v) { part_counts.push_back(v); });
                      },
                      {},
                      ""});
        for (std::size_t i = 0; i < vs.size(); ++i) {
          if (vs[i].name == "filter twice") vs.back().base = i;
        }
        vs.back().filter = true;
        vs.back().check = [&part_counts, runs, &in_span, &out_span] {
          std::size_t wrong = part_counts.size() != runs;
          for (std::size_t k = 0; k < runs && k < part_counts.size(); ++k) {
            const auto from = run_part(in_span, runs, k);
            const auto to = run_part(out_span, runs, k);
            std::size_t c = 0;
            for (std::size_t i = 0; i < from.size; ++i) {
              if (!Positive{}(from.data[i])) continue;
              wrong += std::memcmp(&to.data[c], &from.data[i], sizeof(float)) != 0;
              ++c;
            }
            wrong += part_counts[k] != c;
          }
          return wrong;
        };
        std::vector<std::size_t> lengths;
        for (std::size_t k = 0; k < runs; ++k) lengths.push_back(run_part(in_span, runs, k).size);
        const auto kept_bytes = static_cast<std::size_t>(
            std::lround(4.0 * static_cast<double>(kept.size()) / static_cast<double>(n)));
        vs.back().predicted = predict(s->member(0).geometry(), s->piece_elems(), o.devices, lengths, kept_bytes);
      }
      // A Reduce of the input: nothing comes back. The plain pipeline's
      // sum is checked against the host's; each spread's against its bits.
      const std::size_t first_reduce = vs.size();
      ReducePipe plain_reduce(chunkpipe::Options{}, chunkpipe::reduce(0.0f, Plus{}));
      float reduced = 0.0f;  // what the latest reduce run returned
      vs.push_back({"reduce plain", [&] { reduced = plain_reduce.run(in_span); }, {}, ""});
      std::vector<std::unique_ptr<ReduceSpread>> reduce_spreads;
      for (const bool twice : {false, true}) {
        chunkpipe::Options o;
        o.devices = twice ? std::vector<int>{dev, dev} : std::vector<int>{dev};
        reduce_spreads.push_back(std::make_unique<ReduceSpread>(o, chunkpipe::reduce(0.0f, Plus{})));
        ReduceSpread* s = reduce_spreads.back().get();
        const std::size_t index = vs.size();
        vs.push_back({twice ? "reduce twice" : "reduce x1", [&vs, s, index, &reduced, &in_span] {
                        reduced = s->run(in_span);
                        vs[index].pieces = pieces_of(s->last_summary());
                      },
                      {},
                      ""});
        vs.back().predicted = predict(s->member(0).geometry(), s->piece_elems(), o.devices, {n}, 0);
      }
      for (std::size_t i = first_reduce; i < vs.size(); ++i) {
        vs[i].base = first_reduce;
        vs[i].reduce = true;
      }
      // The Reduce cut into 16 runs queued on the device listed twice: a
      // fold of ranges continues the runs before it, as a Map's does, so
      // it is compared with one spread Reduce of the same bytes ("reduce
      // twice"); each run's sum checked against one pipeline's sum of the
      // same part, to the bit.
      std::vector<float> part_sums;  // the queued Reduce runs' latest sums
      {
        const std::size_t runs = 2 * queued_runs;
        chunkpipe::Options o;
        o.devices = {dev, dev};
        reduce_spreads.push_back(std::make_unique<ReduceSpread>(o, chunkpipe::reduce(0.0f, Plus{})));
        ReduceSpread* s = reduce_spreads.back().get();
        const std::size_t index = vs.size();
        vs.push_back({"reduce 2x, 16 q", [&vs, s, index, runs, &in_span, &part_sums] {
                        std::vector<chunkpipe::SpreadTicket<float>> ts;
                        for (std::size_t k = 0; k < runs; ++k) ts.push_back(s->run_async(run_part(in_span, runs, k)));
                        part_sums.clear();
                        vs[index].pieces = wait_queued(ts, [&](auto v) { part_sums.push_back(v); });
                      },
                      {},
                      ""});
        for (std::size_t i = 0; i < vs.size(); ++i) {
          if (vs[i].name == "reduce twice") vs.back().base = i;
        }
        vs.back().reduce = true;
        vs.back().check = [&plain_reduce, &part_sums, runs, &in_span] {
          std::size_t wrong = part_sums.size() != runs;
          for (std::size_t k = 0; k < runs && k < part_sums.size(); ++k) {
            const float want = plain_reduce.run(run_part(in_span, runs, k));
            wrong += std::memcmp(&want, &part_sums[k], sizeof want) != 0;
          }
          return wrong;
        };
        std::vector<std::size_t> lengths;
        for (std::size_t k = 0; k < runs; ++k) lengths.push_back(run_part(in_span, runs, k).size);
        vs.back().predicted = predict(s->member(0).geometry(), s->piece_elems(), o.devices, lengths, 0);
      }
      double exact_sum = 0;
      for (std::size_t i = 0; i < n; ++i) exact_sum += static_cast<double>(in[i]);
      float plain_sum = 0.0f;  // the plain reduce's bits, once checked
      std::unique_ptr<chunkpipe::PinnedArray<float>> scratch_a, scratch_b;
      std::size_t host_row = 0;  // 0: none (pinned runs)
      if (pageable) {
        scratch_a = std::make_unique<chunkpipe::PinnedArray<float>>(n);
        scratch_b = std::make_unique<chunkpipe::PinnedArray<float>>(n);
        std::memset(scratch_b->data(), 0, n * sizeof(float));
        host_row = vs.size();
        vs.push_back({"host memcpy", [&] { host_memcpy(in, scratch_a->data(), scratch_b->data(), out, n); }, {}, ""});
        vs.back().checked = false;
      }
      // Checked first, outputs poisoned.
      for (Variant& v : vs) {
        if (!v.checked) continue;
        std::memset(out, 0xFF, n * sizeof(float));
        v.run();
        std::size_t wrong = 0;
        if (v.check) {
          wrong = v.check();
        } else if (v.reduce) {
          // The plain sum near the host's (float rounding over n terms),
          // and every spread's sum that sum to the bit.
          if (&v == &vs[first_reduce]) {
            plain_sum = reduced;
            wrong = std::fabs(static_cast<double>(reduced) - exact_sum) > 1e-6 * static_cast<double>(n);
          } else {
            wrong = std::memcmp(&reduced, &plain_sum, sizeof reduced) != 0;
          }
          if (wrong) std::printf("spread_bench: %s summed %.9g (plain %.9g, host %.9g)\n", v.name.c_str(), reduced, plain_sum, exact_sum);
        } else if (v.filter) {
          // Every kept element, to the bit, and nothing written past them.
          wrong = filtered != kept.size() || std::memcmp(out, kept.data(), kept.size() * sizeof(float)) != 0;
          if (kept.size() < n) {
            std::uint32_t bits = 0;
            std::memcpy(&bits, out + kept.size(), sizeof bits);
            wrong += bits != 0xFFFFFFFFu;
          }
        } else {
          for (std::size_t i = 0; i < n; i += 1021) wrong += closed.matches(in[i], out[i]) ? 0 : 1;
          if (!closed.matches(in[n - 1], out[n - 1])) ++wrong;
        }
        if (wrong) {
          std::printf("spread_bench: %s wrote %zu wrong samples\n", v.name.c_str(), wrong);
          ok = false;
        }
      }
      for (int r = 0; r < args.rounds; ++r) {
        for (std::size_t i = 0; i < vs.size(); ++i) {
          Variant& v = vs[(i + static_cast<std::size_t>(r)) % vs.size()];
          v.ms.push_back(wall_ms(v.run));
        }
      }
      // A filter's floor: the input in, the kept elements out.
      const double kept_bytes = static_cast<double>(kept.size()) * sizeof(float);
      const double filter_floor_ms = std::max({bytes / (link.h2d_gbps * 1e6), kept_bytes / (link.d2h_gbps * 1e6),
                                               (bytes + kept_bytes) / (link.both_gbps * 1e6)});
      for (const Variant& v : vs) {
        const double ms = median(v.ms);
        const double vs_plain = paired(v, vs[v.base]);
        const double floor_ms = v.reduce ? bytes / (link.h2d_gbps * 1e6) : v.filter ? filter_floor_ms : floor_ms_map;
        char predicted[32] = "", of_host[32] = "";
        if (v.predicted >= 0) std::snprintf(predicted, sizeof predicted, "%.2f", v.predicted);
        if (host_row != 0 && !v.filter && !v.reduce) std::snprintf(of_host, sizeof of_host, "%.3f", median(vs[host_row].ms) / ms);
        // The host's own row has no floor or plain to be judged against.
        char of_floor[32] = "", ratio[32] = "";
        if (v.checked) {
          std::snprintf(of_floor, sizeof of_floor, "%.3f", floor_ms / ms);
          std::snprintf(ratio, sizeof ratio, "%.3f", vs_plain);
        }
        std::printf("%-5zu %-9s %-14s %10.2f %10.2f %9s %9s %10s %8s  %s\n", gib, pageable ? "pageable" : "pinned",
                    v.name.c_str(), ms, floor_ms, of_floor, ratio, predicted, of_host, v.pieces.c_str());
        if (csv) {
          std::fprintf(csv, "%zu,%s,%s,%.4f,%.4f,%s,%s,%s,%s,%s\n", gib, pageable ? "pageable" : "pinned",
                       v.name.c_str(), ms, floor_ms, of_floor, ratio, predicted, of_host, v.pieces.c_str());
        }
      }
      if (count < 2) {
        std::printf("%-5zu %-9s %-14s %10s  (one device present: the several-GPU rows need nvidia-h200-x2)\n", gib,
                    pageable ? "pageable" : "pinned", "2 GPUs", "not run");
      }
    }
  }
  if (csv) std::fclose(csv);
  std::printf("\nvs plain: median of per-round ratios (spread time / plain time; filter rows: / filter plain; "
              "reduce rows: / reduce plain; "
              "twice, N q: / same twice; filter and reduce 2x, 16 q: / filter and reduce twice; sink twice: / same twice; sink 2x, 16 q: / sink twice); below 1.03 meets \"within 3%%\" "
              "(the queued rows' goal: at most 1/0.97 "
              "= 1.031).\n");
  std::printf("spread_bench: %s\n", ok ? "every variant checked" : "WRONG RESULTS");
  return ok ? 0 : 1;
}
