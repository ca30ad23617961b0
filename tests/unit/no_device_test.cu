// SPDX-License-Identifier: MIT
// ChunkedPipeline where CUDA has no device to give (label cpu: CI has no
// driver). A CUDA program runs without a driver until it calls CUDA, so
// nvcc builds this one and it runs everywhere:
//   - a run's range checks come first: bad ranges throw config_error about
//     the ranges, never a CUDA or no-device error (on every machine);
//   - where cudaGetDeviceCount fails or counts none, the pipeline is still
//     built, and its runs throw no_device_error, whose message says so in
//     words and names HostPipeline. Where there is a device (the GPU
//     machine), those cases say why they did not check and pass: the GPU
//     suite covers that machine.
#include <chunkpipe/pipeline.cuh>

#include "catch.hpp"
#include "thrown.hpp"

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>
#include <vector>

using namespace chunkpipe;
using test_support::contains;
using test_support::thrown_by;

namespace {

struct Twice {
  CHUNKPIPE_HOST_DEVICE float operator()(float x) const { return 2.f * x; }
};
struct Plus {
  CHUNKPIPE_HOST_DEVICE float operator()(float a, float b) const { return a + b; }
};

// Whether CUDA gives this process a device: what ChunkedPipeline asks.
bool has_device() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  (void)cudaGetLastError();
  return err == cudaSuccess && count > 0;
}

// The type and text of what `f()` throws.
template <class F>
std::string kind_of_throw(F&& f) {
  try {
    f();
  } catch (const no_device_error&) {
    return "no_device_error";
  } catch (const config_error&) {
    return "config_error";
  } catch (const cuda_error&) {
    return "cuda_error";
  } catch (const std::exception&) {
    return "other";
  }
  return "(nothing thrown)";
}

}  // namespace

TEST_CASE("a run's range checks come before any CUDA call", "[errors][no_device]") {
  ChunkedPipeline<Map<Twice>> pipe({.chunk_elems = 64});
  std::vector<float> x(1000, 1.f), out(1000), short_out(999);

  // An output shorter than the input: the size check, not the driver.
  CHECK(kind_of_throw([&] { pipe.run(x, short_out); }) == "config_error");
  const std::string short_msg = thrown_by([&] { pipe.run(x, short_out); });
  CHECK(contains(short_msg, "output 0 has 999 elements, fewer than the 1000 input elements"));
  CHECK(kind_of_throw([&] { (void)pipe.run_async(x, short_out); }) == "config_error");

  // Inputs of different lengths, and a null range with a length.
  std::vector<float> y(10);
  ChunkedPipeline<Map<Plus>> add({.chunk_elems = 64});
  CHECK(kind_of_throw([&] { add.run(inputs(x, y), out); }) == "config_error");
  CHECK(contains(thrown_by([&] { add.run(inputs(x, y), out); }), "inputs have different lengths"));

  // An output over part of its input: overlaps within a run are range
  // checks too.
  CHECK(kind_of_throw([&] {
          pipe.run(::cuda::std::span<const float>(x.data(), 500), ::cuda::std::span<float>(x.data() + 1, 500));
        }) == "config_error");

  // A folding run checks its inputs first too.
  ChunkedPipeline<Map<Plus>, Reduce<float, Plus>> dot({.chunk_elems = 64}, Map<Plus>{}, reduce(0.f, Plus{}, 16));
  CHECK(kind_of_throw([&] { (void)dot.run(inputs(x, y)); }) == "config_error");
}

TEST_CASE("without a device, runs throw no_device_error naming HostPipeline", "[errors][no_device]") {
  if (has_device()) {
    WARN("this machine has a CUDA device: no_device_error cannot happen here (the GPU tests run)");
    return;
  }
  // Built without a device, whatever Options::device says: there is no
  // device count to check it against.
  ChunkedPipeline<Map<Twice>> pipe({.chunk_elems = 64});
  ChunkedPipeline<Map<Twice>> third({.chunk_elems = 64, .device = 2});
  ChunkedPipeline<Reduce<float, Plus>> sum({.chunk_elems = 64}, reduce(0.f, Plus{}, 16));
  CHECK(pipe.device() == -1);
  CHECK(third.device() == -1);

  std::vector<float> x(1000, 1.f), out(1000);
  const std::string msg = thrown_by([&] { pipe.run(x, out); });
  INFO(msg);
  CHECK(kind_of_throw([&] { pipe.run(x, out); }) == "no_device_error");
  CHECK(contains(msg, "chunkpipe: no CUDA device to run on: "));
  CHECK(contains(msg, "chunkpipe::HostPipeline (<chunkpipe/host_backend.hpp>)"));
  CHECK_FALSE(contains(msg, "CUDA error"));  // one plain error, not cuda_error's text
  // Every run says so, not only the first; queued, folding and Source runs too.
  CHECK(kind_of_throw([&] { pipe.run(x, out); }) == "no_device_error");
  CHECK(kind_of_throw([&] { (void)pipe.run_async(x, out); }) == "no_device_error");
  CHECK(kind_of_throw([&] { third.run(x, out); }) == "no_device_error");
  CHECK(kind_of_throw([&] { (void)sum.run(x); }) == "no_device_error");
  CHECK(kind_of_throw([&] { (void)sum.run_async(x); }) == "no_device_error");
  auto gen = source<float>([](std::size_t, ::cuda::std::span<float>) -> std::size_t { return 0; });
  CHECK(kind_of_throw([&] { pipe.run(gen, out); }) == "no_device_error");
  // It is a pipeline_error, as the other reasons a run cannot start are.
  CHECK_THROWS_AS(pipe.run(x, out), pipeline_error);

  // What needs no device still works, and none of it throws.
  CHECK(pipe.healthy());
  CHECK(pipe.plan_for(1000).ops.size() > 0);
  CHECK_NOTHROW(pipe.wait());
  CHECK_NOTHROW(pipe.release_registrations());
  CHECK_NOTHROW(pipe.decide_now());
}
