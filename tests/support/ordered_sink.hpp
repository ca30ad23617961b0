// SPDX-License-Identifier: MIT
// A Sink for tests that checks it is fed in chunk order with contiguous
// offsets, copies what it gets into `got`, and counts its chunks and its
// finish() and abort() calls in a SinkLog (guarded by the log's mutex, so
// a test's Source may share it):
//   SinkLog log;
//   pipe.run(src, chunkpipe::Sink<float, OrderedSink<float>>{{&log, got.data(), n}});
#pragma once

#include <cuda/std/span>

#include <cstddef>
#include <cstring>
#include <mutex>

namespace test_support {

struct SinkLog {
  std::mutex m;
  std::size_t next_chunk = 0, next_offset = 0;  // what the sink expects next
  std::size_t delivered = 0;                    // chunks it got
  bool misuse = false;                          // out of order, or past `n`
  int finished = 0, aborted = 0;
};

template <class U>
struct OrderedSink {
  SinkLog* log;
  U* got;
  std::size_t n;
  void operator()(std::size_t chunk, std::size_t offset, ::cuda::std::span<const U> data) {
    std::lock_guard<std::mutex> lock(log->m);
    if (chunk != log->next_chunk || offset != log->next_offset || offset + data.size() > n) {
      log->misuse = true;
      return;
    }
    std::memcpy(got + offset, data.data(), data.size() * sizeof(U));
    ++log->next_chunk;
    log->next_offset += data.size();
    ++log->delivered;
  }
  void finish() {
    std::lock_guard<std::mutex> lock(log->m);
    ++log->finished;
  }
  void abort() {
    std::lock_guard<std::mutex> lock(log->m);
    ++log->aborted;
  }
};

}  // namespace test_support
