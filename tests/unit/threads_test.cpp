// SPDX-License-Identifier: MIT
// Threads: runs started on one thread and waited for on others, a ticket
// waited for from two threads at once, and a Sink finished exactly once.
// Built twice: as a plain CPU test and under ThreadSanitizer
// (tests/CMakeLists.txt), which reports any data race in the shared run
// completion code and the host backend.
#include <chunkpipe/host_backend.hpp>

#include "catch.hpp"

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

using namespace chunkpipe;

namespace {

struct Fma {
  float a, b;
  CHUNKPIPE_HOST_DEVICE float operator()(float x) const { return std::fma(x, a, b); }
};

}  // namespace

TEST_CASE("runs started on one thread are waited for on another", "[threads]") {
  const Fma f{1.25f, -0.5f};
  HostPipeline<Map<Fma>> pipe({.chunk_elems = 32, .depth = 3}, Map<Fma>{f});
  const int runs = 40;
  std::vector<std::vector<float>> ins(runs), outs(runs);
  for (int k = 0; k < runs; ++k) {
    ins[k].assign(100 + static_cast<std::size_t>(k), static_cast<float>(k));
    outs[k].assign(ins[k].size(), std::nanf(""));
  }
  std::mutex m;
  std::condition_variable cv;
  std::deque<std::pair<int, HostTicket>> queue;
  bool done = false;
  std::atomic<int> wrong{0};  // Catch's assertions are for the main thread only
  std::thread waiter([&] {
    for (;;) {
      std::pair<int, HostTicket> item;
      {
        std::unique_lock<std::mutex> lock(m);
        cv.wait(lock, [&] { return done || !queue.empty(); });
        if (queue.empty()) return;
        item = queue.front();
        queue.pop_front();
      }
      item.second.wait();
      for (float v : outs[static_cast<std::size_t>(item.first)]) wrong += v == f(static_cast<float>(item.first)) ? 0 : 1;
    }
  });
  for (int k = 0; k < runs; ++k) {
    HostTicket t = pipe.run_async(ins[static_cast<std::size_t>(k)], outs[static_cast<std::size_t>(k)]);
    {
      std::lock_guard<std::mutex> lock(m);
      queue.emplace_back(k, t);
    }
    cv.notify_one();
  }
  {
    std::lock_guard<std::mutex> lock(m);
    done = true;
  }
  cv.notify_one();
  waiter.join();
  REQUIRE(wrong == 0);
}

TEST_CASE("one ticket waited for from two threads: the Sink finishes once, both see the outcome", "[threads]") {
  HostPipeline<Map<Fma>> pipe({.chunk_elems = 16, .depth = 2}, Map<Fma>{{2.f, 0.f}});
  for (int round = 0; round < 20; ++round) {
    std::atomic<int> finished{0}, aborted{0};
    struct Count {
      std::atomic<int>* finished;
      std::atomic<int>* aborted;
      bool fail;
      void operator()(std::size_t chunk, std::size_t, ::cuda::std::span<const float>) const {
        if (fail && chunk == 1) throw std::runtime_error("sink failed");
      }
      void finish() const { ++*finished; }
      void abort() const { ++*aborted; }
    };
    const bool fail = round % 2 == 1;
    std::vector<float> x(100, 1.f);
    HostTicket t = pipe.run_async(x, sink<float>(Count{&finished, &aborted, fail}));
    std::atomic<int> errors{0};
    auto wait = [&] {
      try {
        t.wait();
      } catch (const std::runtime_error&) {
        ++errors;
      }
    };
    std::thread a(wait), b(wait);
    a.join();
    b.join();
    REQUIRE(finished == (fail ? 0 : 1));
    REQUIRE(aborted == (fail ? 1 : 0));
    REQUIRE(errors == (fail ? 2 : 0));
  }
}

TEST_CASE("two threads start runs on one pipeline at once", "[threads]") {
  const Fma f{0.5f, 3.f};
  HostPipeline<Map<Fma>> pipe({.chunk_elems = 64, .depth = 3}, Map<Fma>{f});
  std::vector<std::vector<float>> ins(2 * 25), outs(2 * 25);
  for (std::size_t k = 0; k < ins.size(); ++k) {
    ins[k].assign(300, static_cast<float>(k));
    outs[k].assign(300, std::nanf(""));
  }
  auto work = [&](std::size_t first) {
    for (std::size_t k = first; k < ins.size(); k += 2) pipe.run(ins[k], outs[k]);
  };
  std::thread a(work, 0), b(work, 1);
  a.join();
  b.join();
  for (std::size_t k = 0; k < ins.size(); ++k) {
    for (float v : outs[k]) REQUIRE(v == f(static_cast<float>(k)));
  }
}
