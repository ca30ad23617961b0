// SPDX-License-Identifier: MIT
//
// streams_bench: a pipeline as a stream of runs. Programs hand a pipeline
// batch after batch (a training loop's next batch, an inference server's
// requests, a file in pieces), often in small chunks; this measures that
// shape against the same bytes as one run and against a hand-written loop,
// in one process, on 1 GiB of pinned float each way:
//
//   runs     64 run_async of 16 MiB (and 1, 4, 64 MiB) back to back, then
//            wait for all: against one run of the whole GiB with the same
//            options, against a hand-written 4-slot loop over the same
//            chunks, and against the same runs issued one by one
//            (Options::coalesce off). Options{} otherwise.
//   windows  one 1 GiB run at windows of 64 KiB to 64 MiB: chunkpipe's
//            default (only the window set: below 8 MiB it schedules this
//            Map-only pipeline in larger units) and fixed policies at the
//            window (their per-chunk cost is chunkpipe's), against the
//            hand-written 4-slot loop (chunk k on stream k % 4: copy in,
//            kernel, copy out), whose per-chunk cost is the host's.
//   host     the host's cost of issuing: 1 MiB runs queued behind a gate
//            (so the GPU does not drain them while they are issued), per run
//            and per op, against the hand-written loop issuing the same
//            copies and kernels; chunkpipe's cost beyond its ops is the
//            difference (runs issued one by one), and the default's cost per
//            run, which issues these contiguous runs in groups.
//
// Every variant is checked against the closed form first (outputs poisoned
// before), then timed in interleaved rounds with CUDA events (the first
// recorded before the pass is issued, the last after a timing stream has
// waited for everything it issued). Ratios are medians of per-round
// ratios. The simulator's prediction (machines from the measured link and
// kernel) stands beside each chunkpipe row. Prints tables; writes CSV.
#include <chunkpipe/pipeline.cuh>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "event_clock.hpp"
#include "hand_loop.hpp"
#include "probes/probe.hpp"
#include "support.hpp"

namespace {

constexpr std::size_t kKiB = 1024, kMiB = kKiB * 1024;

// The lesson's chain of FMAs and its one-thread-per-element kernel, as the
// probes time them.
using probe::Fma;
using bench::ClosedForm;
using timing::median_of;
using timing::paired_ratio;
using timing::time_rounds;
using probe::kern;

// Spins on the GPU for about `ns` (at most 2 GHz): the gate of the host section.
__global__ void spin(long long ns) {
  const long long start = clock64();
  while (clock64() - start < ns * 2) {
  }
}

using Pipe = chunkpipe::ChunkedPipeline<chunkpipe::Map<Fma>>;

struct Args {
  std::size_t total_mib = 1024;
  int rounds = 5;
  int fmas = 512;          // the runs section's intensity
  int window_fmas = 0;     // the windows section's intensity
  std::vector<std::size_t> run_mib{1, 4, 16, 64};
  std::vector<std::size_t> window_kib{64, 256, 1024, 4096, 16384, 65536};
  int host_runs = 256;
  std::string csv = "streams_bench.csv";
};


// The hand-written loop: 4 slots on 4 streams, chunk k on stream k % 4
// (hand_loop.hpp, shared with graphs_bench).
using bench::HandLoop;

// One timed variant: issue() queues a pass, join(s) makes s wait for it,
// finish() waits for its tickets (reporting errors).
struct Variant {
  std::string name;
  std::function<void()> issue;
  std::function<void(cudaStream_t)> join;
  std::function<void()> finish = [] {};
  std::size_t runs = 1;     // runs (or chunks, for the hand loop) per pass
  double predicted = -1;    // the simulator's ms, -1 if none
  std::vector<double> ms, issue_us;
};


// Checks a variant's output (poisoned first): every element against the
// closed form, and bit for bit against `ref` (the hand-written loop's
// output, same kernel) when given. Returns false and says where otherwise.
bool check(Variant& v, const float* in, float* out, std::size_t total, Fma f, std::vector<float>* ref) {
  example::poison(out, total);
  v.issue();
  CHUNKPIPE_CUDA_TRY(cudaDeviceSynchronize());
  v.finish();
  const ClosedForm closed(f.iters);
  for (std::size_t i = 0; i < total; ++i) {
    const double want = closed(in[i]);
    if (!(std::fabs(static_cast<double>(out[i]) - want) <= 1e-4 * std::fabs(want) + 1e-6)) {
      std::fprintf(stderr, "FAIL: %s wrong at element %zu: %g, want %g\n", v.name.c_str(), i, out[i], want);
      return false;
    }
  }
  if (ref != nullptr) {
    if (ref->empty()) {
      ref->assign(out, out + total);
    } else if (std::memcmp(ref->data(), out, total * sizeof(float)) != 0) {
      std::fprintf(stderr, "FAIL: %s differs from the hand-written loop's bits\n", v.name.c_str());
      return false;
    }
  }
  return true;
}



// `runs` back-to-back run_async over consecutive slices of the arrays.
Variant stream_of_runs(const std::string& name, Pipe& pipe, const float* in, float* out, std::size_t total,
                       std::size_t run_elems, std::vector<chunkpipe::RunTicket>& tickets) {
  Variant v;
  v.name = name;
  v.runs = (total + run_elems - 1) / run_elems;
  v.issue = [&pipe, in, out, total, run_elems, &tickets] {
    tickets.clear();
    for (std::size_t off = 0; off < total; off += run_elems) {
      const std::size_t n = std::min(run_elems, total - off);
      tickets.push_back(pipe.run_async(chunkpipe::pinned(chunkpipe::host_span(in + off, n)),
                                       chunkpipe::pinned(chunkpipe::host_span(out + off, n))));
    }
  };
  v.join = [&tickets](cudaStream_t s) {
    for (auto& t : tickets) t.enqueue_wait(s);
  };
  v.finish = [&tickets] {
    for (auto& t : tickets) t.wait();
  };
  return v;
}

Variant hand_variant(const std::string& name, HandLoop& h) {
  Variant v;
  v.name = name;
  v.runs = (h.total + h.chunk - 1) / h.chunk;
  v.issue = [&h] { h.issue(); };
  v.join = [&h](cudaStream_t s) { h.join(s); };
  return v;
}

// The simulator's figure for a pipeline's runs of `run_elems` over `total`.
double predict(const Pipe& pipe, std::size_t total, std::size_t run_elems, const chunkpipe::Machine& m,
               double ns_per_elem) {
  const chunkpipe::Geometry& g = pipe.geometry();
  std::vector<chunkpipe::RunSpec> runs;
  for (std::size_t off = 0; off < total; off += run_elems) {
    const std::size_t n = std::min(run_elems, total - off);
    runs.push_back({(n + g.chunk_elems - 1) / g.chunk_elems, false, false, n});
  }
  chunkpipe::PlanShape shape;
  const chunkpipe::Plan plan = chunkpipe::make_plan(g.policy, g.depth, shape, runs);
  chunkpipe::Workload w = chunkpipe::map_workload(total, g.chunk_elems, ns_per_elem * 1e-6 * static_cast<double>(total));
  return chunkpipe::makespan_ms(chunkpipe::simulate(plan, w, m));
}

std::vector<std::size_t> parse_list(const std::string& text) {
  std::vector<std::size_t> v;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t comma = text.find(',', pos);
    v.push_back(std::strtoull(text.substr(pos, comma - pos).c_str(), nullptr, 10));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return v;
}

int parse(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto value = [&]() -> std::string { return example::next_value(argc, argv, i); };
    if (s == "--rounds") a.rounds = std::atoi(value().c_str());
    else if (s == "--total-mib") a.total_mib = std::strtoull(value().c_str(), nullptr, 10);
    else if (s == "--fmas") a.fmas = std::atoi(value().c_str());
    else if (s == "--window-fmas") a.window_fmas = std::atoi(value().c_str());
    else if (s == "--host-runs") a.host_runs = std::atoi(value().c_str());
    else if (s == "--run-mib") a.run_mib = parse_list(value());
    else if (s == "--window-kib") a.window_kib = parse_list(value());
    else if (s == "--csv") a.csv = value();
    else if (s == "--help" || s == "-h") {
      std::printf("usage: streams_bench [--rounds N] [--total-mib M] [--fmas F] [--window-fmas F] [--host-runs N] "
                  "[--run-mib 1,4,16,64] [--window-kib 64,256,...] [--csv FILE]\n");
      return 1;
    } else {
      std::fprintf(stderr, "streams_bench: unknown option %s\n", s.c_str());
      return 2;
    }
  }
  if (a.rounds < 1 || a.total_mib == 0 || a.host_runs < 2) {
    std::fprintf(stderr, "streams_bench: --rounds >= 1, --total-mib >= 1, --host-runs >= 2\n");
    return 2;
  }
  return 0;
}

struct CsvRow {
  std::string section, variant;
  double size_kib, ms, min_ms, max_ms, ratio, ratio_to, issue_us_per_run, predicted_ms;
  std::string ratio_name;
};

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (const int rc = parse(argc, argv, a); rc != 0) return rc == 1 ? 0 : rc;
  if (const int rc = example::require_gpu("benchmark"); rc != 0) return rc;
  const cudaDeviceProp prop = example::current_gpu();
  const std::size_t total = a.total_mib * kMiB / sizeof(float);
  chunkpipe::PinnedArray<float> in(total), out(total);
  for (std::size_t i = 0; i < total; ++i) in[i] = static_cast<float>(i % 4093) / 4093.f - 0.5f;

  std::printf("streams_bench on %s: %zu MiB of float each way, pinned; %d rounds\n", prop.name, a.total_mib, a.rounds);
  const chunkpipe::LinkModel link = chunkpipe::measure_link();
  chunkpipe::Machine machine;
  machine.link = link;
  std::printf("link: h2d %.1f  d2h %.1f  both %.1f GB/s, %.1f us per copy\n", link.h2d_gbps, link.d2h_gbps,
              link.both_gbps, link.latency_us);
  timing::EventClock clock;
  std::vector<CsvRow> csv;
  bool ok = true;

  // -- runs -----------------------------------------------------------------
  {
    const Fma f{a.fmas};
    const double ns = chunkpipe::measure_map_ns_per_elem<float>(f, std::size_t{1} << 24);
    std::printf("\n== runs: back-to-back run_async over the GiB, Options{}, %d FMAs/element (kernel %.3f ns/element)\n",
                a.fmas, ns);
    std::printf("%10s %-34s %9s %9s %9s %10s %10s %12s %10s\n", "run", "variant", "median", "min", "max", "/one run",
                "/hand", "issue us/run", "predicted");
    Pipe one(chunkpipe::Options{}, chunkpipe::Map<Fma>{f});
    for (std::size_t rm : a.run_mib) {
      const std::size_t run_elems = std::min(total, rm * kMiB / sizeof(float));
      Pipe pipe(chunkpipe::Options{}, chunkpipe::Map<Fma>{f});
      // The same runs, each issued on its own (Options::coalesce off).
      Pipe apart(chunkpipe::Options{.coalesce = false}, chunkpipe::Map<Fma>{f});
      std::vector<chunkpipe::RunTicket> t_one, t_many, t_apart;
      std::vector<Variant> vs;
      vs.push_back(stream_of_runs("one run of the whole GiB", one, in.data(), out.data(), total, total, t_one));
      vs.back().predicted = predict(one, total, total, machine, ns);
      vs.push_back(stream_of_runs(std::to_string(total / run_elems) + " runs back to back", pipe, in.data(), out.data(),
                                  total, run_elems, t_many));
      // Runs shorter than the unit are issued in groups of a unit or more
      // while the GPU is busy: the simulator sees the groups.
      const std::size_t unit = pipe.geometry().chunk_elems;
      const std::size_t group = run_elems >= unit ? run_elems : (unit + run_elems - 1) / run_elems * run_elems;
      vs.back().predicted = predict(pipe, total, group, machine, ns);
      HandLoop hand(total, std::min(run_elems, pipe.geometry().chunk_elems), in.data(), out.data(), f);
      vs.push_back(hand_variant("hand-written 4-slot loop", hand));
      vs.push_back(stream_of_runs("the same runs, coalesce off", apart, in.data(), out.data(), total, run_elems,
                                  t_apart));
      vs.back().predicted = predict(apart, total, run_elems, machine, ns);
      std::vector<float> ref;
      ok = check(vs[2], in.data(), out.data(), total, f, &ref) && ok;
      for (std::size_t k : {0, 1, 3}) ok = check(vs[k], in.data(), out.data(), total, f, &ref) && ok;
      time_rounds(clock, vs, a.rounds);
      for (Variant& v : vs) {
        const example::Timing t = example::summarise(v.ms);
        const double vs_one = paired_ratio(v, vs[0]), vs_hand = paired_ratio(v, vs[2]);
        const double issue = median_of(v.issue_us) / static_cast<double>(v.runs);
        std::printf("%7zu MiB %-34s %9.3f %9.3f %9.3f %10.3f %10.3f %12.2f %10.3f\n", rm, v.name.c_str(), t.median,
                    t.min, t.max, vs_one, vs_hand, issue, v.predicted);
        csv.push_back({"runs", v.name, static_cast<double>(run_elems * sizeof(float)) / kKiB, t.median, t.min, t.max,
                       vs_one, vs_hand, issue, v.predicted, "one run"});
      }
      std::printf("%10s one run / back to back = %.3f (goal for 16 MiB runs: >= 0.97; for 1 MiB: >= 0.85); "
                  "coalesce off %.3f; runs issued together %zu\n",
                  "", 1.0 / paired_ratio(vs[1], vs[0]), 1.0 / paired_ratio(vs[3], vs[0]), pipe.runs_coalesced());
    }
  }

  // -- windows --------------------------------------------------------------
  {
    const Fma f{a.window_fmas};
    const double ns = chunkpipe::measure_map_ns_per_elem<float>(f, std::size_t{1} << 24);
    std::printf("\n== windows: one run of the GiB at small windows, %d FMAs/element\n", a.window_fmas);
    std::printf("%10s %-34s %9s %9s %9s %10s %10s %12s %10s\n", "window", "variant", "median", "min", "max", "/hand",
                "us/window", "issue us/w", "predicted");
    for (std::size_t wk : a.window_kib) {
      const std::size_t w = std::min(total, wk * kKiB / sizeof(float));
      const std::size_t chunks = (total + w - 1) / w;
      Pipe def(chunkpipe::Options{.chunk_elems = w}, chunkpipe::Map<Fma>{f});
      // The fixed policies stay on streams: the automatic executor would
      // turn their repeated small-window runs into graphs (graphs_bench
      // measures those).
      Pipe slot(chunkpipe::Options{.chunk_elems = w, .depth = 4, .policy = chunkpipe::Policy::slot_streams,
                                   .executor = chunkpipe::Executor::streams},
                chunkpipe::Map<Fma>{f});
      Pipe stage(chunkpipe::Options{.chunk_elems = w, .depth = 3, .policy = chunkpipe::Policy::stage_streams,
                                    .executor = chunkpipe::Executor::streams},
                 chunkpipe::Map<Fma>{f});
      HandLoop hand(total, w, in.data(), out.data(), f);
      std::vector<chunkpipe::RunTicket> t_def, t_slot, t_stage;
      std::vector<Variant> vs;
      vs.push_back(hand_variant("hand-written 4-slot loop", hand));
      // The default may schedule a small window in larger units
      // (Options::memory_elems): the name says which it ran.
      const chunkpipe::Geometry& g = def.geometry();
      const std::string unit = g.chunk_elems == w ? "" : ", units of " + std::to_string(g.chunk_elems * sizeof(float) / kKiB) + " KiB";
      vs.push_back(stream_of_runs("chunkpipe default (" + std::string(chunkpipe::to_string(g.policy)) + " d" +
                                      std::to_string(g.depth) + unit + ")",
                                  def, in.data(), out.data(), total, total, t_def));
      vs.back().predicted = predict(def, total, total, machine, ns);
      vs.push_back(stream_of_runs("chunkpipe slot_streams d4", slot, in.data(), out.data(), total, total, t_slot));
      vs.back().predicted = predict(slot, total, total, machine, ns);
      vs.push_back(stream_of_runs("chunkpipe stage_streams d3", stage, in.data(), out.data(), total, total, t_stage));
      vs.back().predicted = predict(stage, total, total, machine, ns);
      std::vector<float> ref;
      for (Variant& v : vs) ok = check(v, in.data(), out.data(), total, f, &ref) && ok;
      time_rounds(clock, vs, a.rounds);
      for (Variant& v : vs) {
        const example::Timing t = example::summarise(v.ms);
        const double vs_hand = paired_ratio(v, vs[0]);
        const double per_chunk_us = t.median * 1000.0 / static_cast<double>(chunks);
        const double issue = median_of(v.issue_us) / static_cast<double>(chunks);
        std::printf("%6zu KiB %-34s %9.3f %9.3f %9.3f %10.3f %10.2f %12.2f %10.3f\n", wk, v.name.c_str(), t.median,
                    t.min, t.max, vs_hand, per_chunk_us, issue, v.predicted);
        csv.push_back({"windows", v.name, static_cast<double>(wk), t.median, t.min, t.max, vs_hand, per_chunk_us, issue,
                       v.predicted, "hand"});
      }
    }
  }

  // -- host -----------------------------------------------------------------
  {
    // 1 MiB runs queued behind a gate: the issue loop's time is the host's
    // alone (the GPU cannot drain the queue meanwhile, so nothing waits).
    const Fma f{a.fmas};
    const std::size_t run_elems = kMiB / sizeof(float);
    const std::size_t n_runs = std::min<std::size_t>(static_cast<std::size_t>(a.host_runs), total / run_elems);
    std::printf("\n== host: issuing %zu runs of 1 MiB behind a gate (host time only)\n", n_runs);
    std::printf("%-40s %12s %12s %14s\n", "variant", "us per run", "us per op", "beyond ops/run");
    chunkpipe::Stream gate = chunkpipe::Stream::create();
    auto gated = [&](auto&& issue_rest, auto&& first) {
      std::vector<double> us;
      for (int r = 0; r < a.rounds + 1; ++r) {
        spin<<<1, 1, 0, gate.get()>>>(200'000'000);  // 200 ms: longer than any issue loop here
        CHUNKPIPE_CUDA_TRY(cudaGetLastError());
        first();
        const auto t0 = std::chrono::steady_clock::now();
        issue_rest();
        const double t = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
        CHUNKPIPE_CUDA_TRY(cudaDeviceSynchronize());
        if (r > 0) us.push_back(t);  // the first round warms up
      }
      return median_of(us);
    };
    // The hand loop: every stream waits for the gate, then the same chunks.
    HandLoop hand(n_runs * run_elems, run_elems, in.data(), out.data(), f);
    chunkpipe::Event opened = chunkpipe::Event::create();
    const double hand_us = gated([&] { hand.issue(1); },
                                 [&] {
                                   CHUNKPIPE_CUDA_TRY(cudaEventRecord(opened.get(), gate.get()));
                                   for (auto& s : hand.s) CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(s.get(), opened.get(), 0));
                                   hand.issue(0, 1);
                                 }) /
                           static_cast<double>(n_runs - 1);
    std::printf("%-40s %12.2f %12.2f %14s\n", "hand-written 4-slot loop (per chunk)", hand_us, hand_us / 3, "-");
    csv.push_back({"host", "hand-written 4-slot loop", 1024, 0, 0, 0, 0, 0, hand_us, -1, "per chunk"});
    // Runs issued one by one (coalesce off: each pays its own ops), then
    // the default, which issues these contiguous runs in groups.
    struct HostVariant {
      chunkpipe::Policy policy;
      bool coalesce;
    };
    for (HostVariant hv : {HostVariant{chunkpipe::Policy::slot_streams, false},
                           HostVariant{chunkpipe::Policy::automatic, false}, HostVariant{chunkpipe::Policy::automatic, true}}) {
      const chunkpipe::Policy policy = hv.policy;
      Pipe pipe(chunkpipe::Options{.depth = policy == chunkpipe::Policy::slot_streams ? 4 : 3, .policy = policy,
                                   .coalesce = hv.coalesce},
                chunkpipe::Map<Fma>{f});
      std::vector<chunkpipe::RunTicket> tickets;
      const double us = gated(
                            [&] {
                              for (std::size_t k = 1; k < n_runs; ++k) {
                                tickets.push_back(pipe.run_async(
                                    chunkpipe::pinned(chunkpipe::host_span(in.data() + k * run_elems, run_elems)),
                                    chunkpipe::pinned(chunkpipe::host_span(out.data() + k * run_elems, run_elems))));
                              }
                            },
                            [&] {
                              for (auto& t : tickets) t.wait();
                              tickets.clear();
                              tickets.push_back(pipe.run_async(
                                  chunkpipe::pinned(chunkpipe::host_span(in.data(), run_elems)),
                                  chunkpipe::pinned(chunkpipe::host_span(out.data(), run_elems)),
                                  chunkpipe::after(::cuda::stream_ref(gate.get()))));
                            }) /
                        static_cast<double>(n_runs - 1);
      for (auto& t : tickets) t.wait();
      const std::string name = "chunkpipe " + std::string(chunkpipe::to_string(pipe.geometry().policy)) + " d" +
                               std::to_string(pipe.geometry().depth) +
                               (hv.coalesce ? " (coalesced runs)" : " (per run of 1 chunk)");
      // A slot_streams run issues the hand loop's three calls plus the
      // event that marks it complete; the rest is chunkpipe's bookkeeping.
      std::printf("%-40s %12.2f %12.2f %14.2f\n", name.c_str(), us, us / 3, us - hand_us);
      csv.push_back({"host", name, 1024, 0, 0, 0, 0, 0, us, -1, "per run"});
    }
  }

  if (FILE* fp = std::fopen(a.csv.c_str(), "w")) {
    std::fprintf(fp, "section,variant,size_kib,median_ms,min_ms,max_ms,ratio,ratio2,issue_us,predicted_ms,ratio_to\n");
    for (const CsvRow& r : csv) {
      std::fprintf(fp, "%s,\"%s\",%.0f,%.4f,%.4f,%.4f,%.4f,%.4f,%.3f,%.4f,%s\n", r.section.c_str(), r.variant.c_str(),
                   r.size_kib, r.ms, r.min_ms, r.max_ms, r.ratio, r.ratio_to, r.issue_us_per_run, r.predicted_ms,
                   r.ratio_name.c_str());
    }
    std::fclose(fp);
    std::printf("\nCSV: %s\n", a.csv.c_str());
  } else {
    std::fprintf(stderr, "streams_bench: cannot write %s\n", a.csv.c_str());
    ok = false;
  }
  return ok ? EXIT_SUCCESS : EXIT_FAILURE;
}
