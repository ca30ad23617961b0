// SPDX-License-Identifier: MIT
// Compile-only: chunkpipe's templates used from a user namespace that
// declares functions and types with the names chunkpipe uses (inputs,
// outputs, quoted, host_span, map, ...) and whose element types live there
// too. Argument-dependent lookup then brings the user's functions into
// every unqualified call inside chunkpipe's templates that has a user type
// among its arguments (std::vector<user::Sample> has user as an associated
// namespace), so an unqualified internal call either becomes ambiguous or,
// worse, silently calls the user's function. chunkpipe must qualify its
// internal calls; this file fails to compile where one is not.
//
// Built twice, as C++ by the host compiler (the host-only headers) and as
// CUDA by nvcc (user_namespace.cu: everything). Never run.

// std::quoted (a better match than chunkpipe's own helper for a non-const
// std::string) visible before any chunkpipe header, as in a user's TU.
#include <iomanip>

#include <chunkpipe/errors.hpp>
#include <chunkpipe/files.hpp>
#include <chunkpipe/hazards.hpp>
#include <chunkpipe/host_backend.hpp>
#include <chunkpipe/io.hpp>
#include <chunkpipe/options.hpp>
#include <chunkpipe/plan.hpp>
#include <chunkpipe/report.hpp>
#include <chunkpipe/simulate.hpp>
#include <chunkpipe/stage.hpp>
#include <chunkpipe/version.hpp>
#if defined(__CUDACC__)
#include <chunkpipe/measure.cuh>
#include <chunkpipe/pipeline.cuh>
#include <chunkpipe/thrust.cuh>
#endif

#include <array>
#include <cstddef>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace user {

// Element types of the user's own.
struct Sample {
  float v;
};
struct Pair {
  float a, b;
};

// Function templates named as chunkpipe's functions and helpers, deleted,
// in the shapes a user might write (one argument, two, any number): each is
// an exact match for any arguments, so an unqualified call inside chunkpipe
// that argument-dependent lookup leads here is ambiguous or calls a deleted
// function. Either is a compile error, where a function that is not
// deleted could be called silently.
#define CHUNKPIPE_TEST_GREEDY(name)              \
  template <class A>                             \
  void name(A&&) = delete;                       \
  template <class A, class B>                    \
  void name(A&&, B&&) = delete;                  \
  template <class... A>                          \
  void name(A&&...) = delete;
CHUNKPIPE_TEST_GREEDY(inputs)
CHUNKPIPE_TEST_GREEDY(outputs)
CHUNKPIPE_TEST_GREEDY(quoted)
CHUNKPIPE_TEST_GREEDY(host_span)
CHUNKPIPE_TEST_GREEDY(map)
CHUNKPIPE_TEST_GREEDY(chunk_fn)
CHUNKPIPE_TEST_GREEDY(pinned)
CHUNKPIPE_TEST_GREEDY(pageable)
CHUNKPIPE_TEST_GREEDY(source)
CHUNKPIPE_TEST_GREEDY(sink)
CHUNKPIPE_TEST_GREEDY(generate)
CHUNKPIPE_TEST_GREEDY(to_string)
CHUNKPIPE_TEST_GREEDY(as_const)
CHUNKPIPE_TEST_GREEDY(as_inputs)
CHUNKPIPE_TEST_GREEDY(as_outputs)
CHUNKPIPE_TEST_GREEDY(validate_run)
CHUNKPIPE_TEST_GREEDY(input_length)
CHUNKPIPE_TEST_GREEDY(check_outputs)
#undef CHUNKPIPE_TEST_GREEDY

// The user's own printing, next to chunkpipe's.
inline std::ostream& operator<<(std::ostream& os, const Sample& s) { return os << s.v; }

// Stages over the user's types.
struct Doubled {
  CHUNKPIPE_HOST_DEVICE Sample operator()(Sample s) const { return Sample{2.0f * s.v}; }
};
struct Sum {
  CHUNKPIPE_HOST_DEVICE Sample operator()(Sample x, Sample y) const { return Sample{x.v + y.v}; }
};
struct Split {
  CHUNKPIPE_HOST_DEVICE ::cuda::std::tuple<Sample, Pair> operator()(Sample s) const {
    return {s, Pair{s.v, -s.v}};
  }
};
struct Touch {  // a chunk-level stage, in place
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    auto s = ctx.in();
    if (ctx.backend == chunkpipe::Backend::host) {
      for (std::size_t i = 0; i < s.size(); ++i) s[i].v += 1.0f;
    }
  }
};

// Types, not functions, with the same names (in a namespace of their own:
// a class and a function template of one name cannot share a scope).
namespace types {
struct inputs {};
struct outputs {};
struct quoted {};
struct host_span {};
struct map {};
struct Value {
  double d;
};
struct Negate {
  CHUNKPIPE_HOST_DEVICE Value operator()(Value v) const { return Value{-v.d}; }
};
}  // namespace types

inline std::string host_runs() {
  using namespace std::string_literals;
  chunkpipe::Options o;
  o.chunk_elems = 256;

  std::vector<Sample> a(1000), b(1000), c(1000);
  std::vector<Pair> p(1000);
  std::array<Sample, 16> fixed{};

  // Ranges of user types, as they are and grouped.
  chunkpipe::HostPipeline<chunkpipe::Map<Doubled>> one(o);
  one.run(a, b);
  one.run(chunkpipe::inputs(a), chunkpipe::outputs(b));
  one.run(chunkpipe::pinned(a), chunkpipe::pageable(b));
  one.run(chunkpipe::host_span(a), chunkpipe::host_span(b.data(), b.size()));
  one.run(fixed, b);
  auto two = chunkpipe::make_host_pipeline(o, chunkpipe::map(Sum{}));
  two.run(chunkpipe::inputs(a, b), chunkpipe::outputs(c));
  auto several = chunkpipe::make_host_pipeline(o, chunkpipe::map(Split{}));
  several.run(a, chunkpipe::outputs(b, p));
  auto chained = chunkpipe::make_host_pipeline(o, chunkpipe::map(Doubled{}), chunkpipe::chunk_fn(Touch{}));
  chained.run(a, b);

  // Sources and sinks of user types.
  one.run(chunkpipe::source<Sample>([](std::size_t, ::cuda::std::span<Sample> s) { return s.size() / 2; }),
          chunkpipe::sink<Sample>([](std::size_t, std::size_t, ::cuda::std::span<const Sample>) {}));
  one.run(chunkpipe::generate<Sample>(100, [](std::size_t i) { return Sample{static_cast<float>(i)}; }), b);

  // files.hpp with user element types.
  auto in = chunkpipe::file_source<Sample>("in.bin");
  auto out = chunkpipe::file_sink<Sample>("out.bin");
  one.run(in, out);
  one.run(chunkpipe::file_source<Sample>("in.bin"), b);
  one.run(a, chunkpipe::file_sink<Sample>("out.bin", chunkpipe::FileSinkOptions{false, false}));

  // Types named like chunkpipe's functions, and their element type.
  std::vector<types::Value> v(10), w(10);
  chunkpipe::HostPipeline<chunkpipe::Map<types::Negate>> neg(o);
  neg.run(v, w);
  neg.run(chunkpipe::inputs(v), chunkpipe::outputs(w));
  types::inputs ti;
  types::outputs to;
  types::quoted tq;
  types::host_span th;
  types::map tm;
  (void)ti, (void)to, (void)tq, (void)th, (void)tm;

  // Plans, the hazard check and reports, printed from here.
  std::ostringstream os;
  const chunkpipe::Plan plan = one.plan_for(1000);
  os << plan << chunkpipe::check_hazards(plan) << chunkpipe::to_string(plan.policy);
  chunkpipe::Workload work;
  work.elems = 1000;
  work.chunk_elems = 256;
  work.stage_ns_per_elem = {1.0};
  chunkpipe::Machine machine;
  machine.link.h2d_gbps = machine.link.d2h_gbps = 50.0;
  const chunkpipe::Report report = chunkpipe::simulate(plan, work, machine);
  os << report << chunkpipe::ascii_timeline(report) << a[0] << std::quoted("quoted"s);
  chunkpipe::write_svg(report, "r.svg");
  chunkpipe::write_chrome_trace(report, "r.json");
  return os.str();
}

#if defined(__CUDACC__)
inline void device_runs() {
  chunkpipe::Options o;
  o.chunk_elems = 256;
  std::vector<Sample> a(1000), b(1000), c(1000);
  std::vector<Pair> p(1000);

  chunkpipe::ChunkedPipeline<chunkpipe::Map<Doubled>> one(o);
  one.run(a, b);
  one.run(chunkpipe::inputs(a), chunkpipe::outputs(b));
  one.run(chunkpipe::pinned(a), chunkpipe::pageable(b));
  chunkpipe::RunTicket t = one.run_async(a, b);
  t.wait();
  auto two = chunkpipe::make_pipeline(o, chunkpipe::map(Sum{}));
  two.run(chunkpipe::inputs(a, b), chunkpipe::outputs(c));
  auto several = chunkpipe::make_pipeline(o, chunkpipe::map(Split{}));
  several.run(a, chunkpipe::outputs(b, p));
  auto chained = chunkpipe::make_pipeline(o, chunkpipe::map(Doubled{}), chunkpipe::chunk_fn(Touch{}));
  chained.run(a, b);
  one.run(chunkpipe::file_source<Sample>("in.bin"), chunkpipe::file_sink<Sample>("out.bin"));
  one.run(chunkpipe::generate<Sample>(100, [](std::size_t i) { return Sample{static_cast<float>(i)}; }), b);

  std::ostringstream os;
  os << one.report() << one.plan_for(1000);
  (void)chunkpipe::measure_map_ns_per_elem<Sample>(Doubled{});
  (void)chunkpipe::thrust_policy(cudaStream_t{});
}
#endif

}  // namespace user

// Something must odr-use the functions above so that every template in
// them is instantiated.
std::string chunkpipe_user_namespace_test() {
#if defined(__CUDACC__)
  user::device_runs();
#endif
  return user::host_runs();
}
