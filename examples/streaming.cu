// SPDX-License-Identifier: MIT
//
// streaming: a stream of batches through one pipeline, the shape most real
// programs have (a training loop's next batch, an inference server's
// requests, a file in pieces).
//
// A producer thread fills each batch in ordinary pageable memory (a
// std::vector, as data from a parser or a socket would be) and hands it
// over; the main thread passes it to run_async() at once and goes on, and
// checks results as they complete, oldest first. Because a pipeline's runs
// form one continuing schedule, batch k+1's copies start while batch k's
// kernels and copies out are still running: nothing drains between
// batches. The program prints the throughput and each batch's latency
// (from "ready" to "result checked"), against the same batches run one at
// a time with run(), which waits for each before the next is handed over.
//
//   streaming [--batches N] [--batch-mib M] [--in-flight K] [--iters I]
#include <chunkpipe/pipeline.cuh>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "support.hpp"

namespace {

struct Fma {  // a chain of FMAs per element: some work, exactly checkable
  int iters;
  __host__ __device__ float operator()(float y) const {
    for (int k = 0; k < iters; ++k) y = fmaf(y, 0.999f, 0.0625f);
    return y;
  }
};

struct Args {
  int batches = 64;
  std::size_t batch_mib = 8;
  int in_flight = 4;
  int iters = 64;
};

int parse(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    if (s == "--batches") a.batches = std::atoi(example::next_value(argc, argv, i));
    else if (s == "--batch-mib") a.batch_mib = std::strtoull(example::next_value(argc, argv, i), nullptr, 10);
    else if (s == "--in-flight") a.in_flight = std::atoi(example::next_value(argc, argv, i));
    else if (s == "--iters") a.iters = std::atoi(example::next_value(argc, argv, i));
    else return 2;
  }
  return a.batches >= 1 && a.batch_mib >= 1 && a.in_flight >= 1 && a.iters >= 0 ? 0 : 2;
}

float value(std::size_t batch, std::size_t i) { return static_cast<float>((i * 7 + batch * 131) % 4093) / 4093.f - 0.5f; }

// A ring of batch buffers between the producer and the main thread.
class Batches {
 public:
  Batches(int slots, std::size_t elems) : in_(static_cast<std::size_t>(slots)), out_(static_cast<std::size_t>(slots)) {
    for (auto& v : in_) v.resize(elems);
    for (auto& v : out_) v.resize(elems);
  }
  std::size_t slots() const { return in_.size(); }
  std::vector<float>& in(int b) { return in_[static_cast<std::size_t>(b) % in_.size()]; }
  std::vector<float>& out(int b) { return out_[static_cast<std::size_t>(b) % out_.size()]; }

  // Producer: waits until batch b's buffer is free, fills it, publishes it.
  template <class Fill>
  void produce(int b, Fill&& fill) {
    {
      std::unique_lock<std::mutex> lock(m_);
      cv_.wait(lock, [&] { return b - released_ < static_cast<int>(slots()); });
    }
    fill(in(b));
    {
      std::lock_guard<std::mutex> lock(m_);
      ready_.push_back({b, example::Clock::now()});
    }
    cv_.notify_all();
  }
  // Main thread: the next batch the producer finished, and when.
  std::pair<int, example::Clock::time_point> next_ready() {
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait(lock, [&] { return !ready_.empty(); });
    auto r = ready_.front();
    ready_.pop_front();
    return r;
  }
  // Main thread: batch b's buffers may be reused.
  void release(int b) {
    {
      std::lock_guard<std::mutex> lock(m_);
      released_ = b + 1;
    }
    cv_.notify_all();
  }

 private:
  std::vector<std::vector<float>> in_, out_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::pair<int, example::Clock::time_point>> ready_;
  int released_ = 0;
};

struct Result {
  double total_ms = 0;
  std::vector<double> latency_ms;
  bool ok = true;
};

// Runs every batch; `overlap` hands batches over with run_async, else run().
Result stream(const Args& a, chunkpipe::ChunkedPipeline<chunkpipe::Map<Fma>>& pipe, bool overlap) {
  const std::size_t elems = a.batch_mib * (std::size_t{1} << 20) / sizeof(float);
  Batches ring(a.in_flight + 1, elems);
  const Fma f{a.iters};
  Result r;
  r.latency_ms.resize(static_cast<std::size_t>(a.batches));
  const auto t0 = example::Clock::now();
  std::thread producer([&] {
    for (int b = 0; b < a.batches; ++b) {
      ring.produce(b, [&](std::vector<float>& v) {
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = value(static_cast<std::size_t>(b), i);
      });
    }
  });
  struct Pending {
    int batch;
    example::Clock::time_point ready;
    chunkpipe::RunTicket ticket;
  };
  std::deque<Pending> pending;
  auto finish_oldest = [&] {
    Pending p = std::move(pending.front());
    pending.pop_front();
    p.ticket.wait();
    const std::vector<float>& y = ring.out(p.batch);
    for (std::size_t i = 0; i < y.size(); i += 97) {
      if (!example::same_bits(y[i], f(value(static_cast<std::size_t>(p.batch), i)))) r.ok = false;
    }
    r.latency_ms[static_cast<std::size_t>(p.batch)] = example::ms_between(p.ready, example::Clock::now());
    ring.release(p.batch);
  };
  for (int b = 0; b < a.batches; ++b) {
    const auto [batch, ready] = ring.next_ready();
    example::poison(ring.out(batch).data(), ring.out(batch).size());
    if (overlap) {
      pending.push_back({batch, ready, pipe.run_async(ring.in(batch), ring.out(batch))});
      if (static_cast<int>(pending.size()) >= a.in_flight) finish_oldest();
    } else {
      pipe.run(ring.in(batch), ring.out(batch));
      pending.push_back({batch, ready, {}});
      finish_oldest();
    }
  }
  while (!pending.empty()) finish_oldest();
  producer.join();
  r.total_ms = example::ms_between(t0, example::Clock::now());
  return r;
}

void print(const char* name, const Args& a, const Result& r) {
  std::vector<double> l = r.latency_ms;
  std::sort(l.begin(), l.end());
  const double bytes = 2.0 * static_cast<double>(a.batch_mib << 20) * a.batches;
  std::printf("%-34s %9.1f ms  %7.1f GB/s  latency median %7.2f ms  p90 %7.2f ms  max %7.2f ms  %s\n", name,
              r.total_ms, bytes / (r.total_ms * 1e6), l[l.size() / 2], l[l.size() * 9 / 10], l.back(),
              r.ok ? "checked" : "WRONG");
}

int run(const Args& a) {
  chunkpipe::ChunkedPipeline<chunkpipe::Map<Fma>> pipe(chunkpipe::Options{}, chunkpipe::Map<Fma>{{a.iters}});
  std::printf("streaming: %d batches of %zu MiB of float (pageable, filled by a producer thread), %d in flight, "
              "%d FMAs per element\n",
              a.batches, a.batch_mib, a.in_flight, a.iters);
  stream(a, pipe, true);  // warm-up: slots, pinned staging buffers, threads
  const Result one_at_a_time = stream(a, pipe, false);
  const Result streamed = stream(a, pipe, true);
  print("one at a time (run)", a, one_at_a_time);
  print("streamed (run_async)", a, streamed);
  std::printf("streamed / one at a time: %.2fx the throughput\n", one_at_a_time.total_ms / streamed.total_ms);
  return one_at_a_time.ok && streamed.ok ? EXIT_SUCCESS : EXIT_FAILURE;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (parse(argc, argv, a) != 0) {
    std::fprintf(stderr, "usage: streaming [--batches N] [--batch-mib M] [--in-flight K] [--iters I]\n");
    return 2;
  }
  if (const int rc = example::require_gpu(); rc != 0) return rc;
  try {
    return run(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "streaming: %s\n", e.what());
    return EXIT_FAILURE;
  }
}
