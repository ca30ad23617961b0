// SPDX-License-Identifier: MIT
// Threads: runs started on one thread and waited for on others, a ticket
// waited for from two threads at once, a Sink finished exactly once, and a
// copy team that several threads hand work to at once.
// Built twice: as a plain CPU test and under ThreadSanitizer
// (tests/CMakeLists.txt), which reports any data race in the shared run
// completion code and the host backend.
#include <chunkpipe/host_backend.hpp>
#include <chunkpipe/detail/copy_team.hpp>

#include "catch.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <memory>
#include <stdexcept>
#include <string>
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

// A spread's members share one copy team (detail::SharedCopyTeam): their
// host lanes hand it copies from several threads at once. Each call must
// get its own bytes and each of its parts exactly once, whoever runs them.
TEST_CASE("a copy team that several threads share copies each caller's bytes and runs each part once",
          "[threads][copy-team]") {
  detail::SharedCopyTeam shared(4);
  const std::shared_ptr<detail::CopyTeam> team = shared.get();
  REQUIRE(team == shared.get());  // one team for all who ask
  REQUIRE(team->threads() == 4);
  const int callers = 4, calls = 30;
  // Over the 1 MiB below which a copy is not shared, in three uneven pieces.
  const std::size_t sizes[3] = {(std::size_t{1} << 20) + 13, 777, (std::size_t{1} << 19) + 5};
  std::atomic<int> wrong{0};
  auto work = [&](int who) {
    std::vector<std::vector<unsigned char>> src(3), dst(3);
    for (int k = 0; k < 3; ++k) {
      src[k].resize(sizes[k]);
      dst[k].resize(sizes[k]);
    }
    for (int c = 0; c < calls; ++c) {
      std::vector<detail::Copy> copies;
      for (int k = 0; k < 3; ++k) {
        for (std::size_t i = 0; i < sizes[k]; ++i) src[k][i] = static_cast<unsigned char>(i * 7 + who * 31 + c + k);
        std::fill(dst[k].begin(), dst[k].end(), static_cast<unsigned char>(0xA5));  // poison
        copies.push_back({dst[k].data(), src[k].data(), sizes[k]});
      }
      team->copy(copies);
      for (int k = 0; k < 3; ++k) wrong += dst[k] != src[k];
      // each(): every part of this call once, with the team's part count.
      std::vector<std::atomic<int>> seen(team->threads());
      team->each([&](std::size_t part, std::size_t parts) {
        if (parts != team->threads() || part >= parts) {
          ++wrong;
          return;
        }
        seen[part].fetch_add(1);
      });
      for (auto& s : seen) wrong += s.load() != 1;
    }
  };
  std::vector<std::thread> ts;
  for (int w = 0; w < callers; ++w) ts.emplace_back(work, w);
  for (std::thread& t : ts) t.join();
  CHECK(wrong.load() == 0);
}

TEST_CASE("a shared copy team rethrows a call's lowest failing part to that caller alone", "[threads][copy-team]") {
  detail::SharedCopyTeam shared(3);
  const std::shared_ptr<detail::CopyTeam> team = shared.get();
  std::atomic<int> wrong{0};
  auto failing = [&] {
    for (int c = 0; c < 40; ++c) {
      try {
        team->each([](std::size_t part, std::size_t) {
          if (part >= 1) throw std::runtime_error("part " + std::to_string(part));
        });
        ++wrong;  // should have thrown
      } catch (const std::runtime_error& e) {
        wrong += std::string(e.what()) != "part 1";
      }
    }
  };
  auto clean = [&] {
    for (int c = 0; c < 40; ++c) {
      std::atomic<int> parts{0};
      try {
        team->each([&](std::size_t, std::size_t) { ++parts; });
      } catch (...) {
        ++wrong;  // another caller's error
      }
      wrong += parts.load() != 3;
    }
  };
  std::thread a(failing), b(clean);
  a.join();
  b.join();
  CHECK(wrong.load() == 0);
}

// A caller never waits for a helper to start one of its parts: here every
// helper may be held by the first caller's parts, which wait until the
// second caller's call returns. A team whose callers left their parts to
// the helpers would hang (the test's own timeout then fails it).
TEST_CASE("a shared copy team's caller runs its own parts when every helper is busy", "[threads][copy-team]") {
  detail::SharedCopyTeam shared(3);
  const std::shared_ptr<detail::CopyTeam> team = shared.get();
  std::mutex m;
  std::condition_variable cv;
  bool second_done = false;
  std::atomic<int> first_parts{0};
  std::thread first([&] {
    team->each([&](std::size_t, std::size_t) {
      ++first_parts;
      std::unique_lock<std::mutex> lock(m);
      cv.wait(lock, [&] { return second_done; });
    });
  });
  // Once the first call's parts have all started, every thread of the team
  // but this one is held.
  while (first_parts.load() < 3) std::this_thread::yield();
  std::atomic<int> second_parts{0};
  team->each([&](std::size_t, std::size_t) { ++second_parts; });
  {
    std::lock_guard<std::mutex> lock(m);
    second_done = true;
  }
  cv.notify_all();
  first.join();
  CHECK(second_parts.load() == 3);
}
