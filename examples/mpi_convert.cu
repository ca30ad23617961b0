// SPDX-License-Identifier: MIT
//
// mpi_convert: one float32 file quantised to 16-bit fixed point by several
// processes, each on its own GPU, into one output file; and a reduction
// over the result, combined with MPI.
//
//   mpirun -np 4 build/examples/mpi_convert --in big.f32 --out big.q16
//   mpirun -np 2 build/examples/mpi_convert --host --in big.f32 --out big.q16
//   build/examples/mpi_convert --make-input big.f32 --elems 100000000
//
// Each rank takes its share of the input's elements (chunkpipe::shard:
// contiguous, in rank order, whole multiples of a Reduce segment), reads
// exactly that range of the input (file_source with a FileRange), pipelines
// it through its GPU (the GPU of its rank on its node, round robin; the
// host backend with --host, which is how CI runs it without a GPU) and
// writes it to its own byte range of the one output file (file_sink with
// FileSinkOptions::first and shared), so no rank ever holds more than its
// pipeline's slots. Then each rank sums its quantised values with a Reduce
// pipeline over the same range, reads its range of both files back to check
// every element and the sum against the host's own conversion, and
// MPI_Reduce adds the ranks' sums on rank 0, which prints them. The sums are integers, so their total is exact:
// any number of ranks writes the same bytes and prints the same checksum
// as one process does (CI compares 1 and 2 ranks, file and checksum).
//
// Build: part of the chunkpipe build when CMake finds MPI (target
// `mpi_convert`). Needs an MPI implementation (Debian: libopenmpi-dev and
// openmpi-bin).
#include <chunkpipe/files.hpp>
#include <chunkpipe/host_backend.hpp>
#include <chunkpipe/pipeline.cuh>
#include <chunkpipe/shard.hpp>

#include <mpi.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <fstream>
#include <string>
#include <vector>

namespace {

// x to a signed 8.8 fixed-point number, rounded half away from zero,
// saturated. x * 256 is exact in float, so host and device agree bit for bit.
struct Quantise {
  CHUNKPIPE_HOST_DEVICE std::int16_t operator()(float x) const {
    const float y = x * 256.0f;
    if (!(y == y)) return 0;  // NaN
    if (y >= 32767.0f) return 32767;
    if (y <= -32768.0f) return -32768;
    return static_cast<std::int16_t>(y >= 0.0f ? y + 0.5f : y - 0.5f);
  }
};

// The quantised value, widened for a sum that cannot overflow.
struct QuantiseWide {
  CHUNKPIPE_HOST_DEVICE std::int64_t operator()(float x) const { return Quantise{}(x); }
};

struct Plus {
  CHUNKPIPE_HOST_DEVICE std::int64_t operator()(std::int64_t a, std::int64_t b) const { return a + b; }
};

constexpr std::size_t segment = chunkpipe::default_reduce_segment;

// Test data: values across the fixed-point range, past it, and NaN.
float value_at(std::size_t i) {
  const std::uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull;
  if (h % 997 == 0) return std::nanf("");
  return static_cast<float>(static_cast<std::int64_t>(h >> 40) - (std::int64_t{1} << 23)) / 65536.0f;  // about +-128
}

int make_input(const std::string& path, std::size_t elems) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  std::vector<float> block(1 << 20);
  for (std::size_t done = 0; done < elems;) {
    const std::size_t n = std::min(block.size(), elems - done);
    for (std::size_t i = 0; i < n; ++i) block[i] = value_at(done + i);
    f.write(reinterpret_cast<const char*>(block.data()), static_cast<std::streamsize>(n * sizeof(float)));
    done += n;
  }
  if (!f) {
    std::fprintf(stderr, "mpi_convert: could not write %s\n", path.c_str());
    return 1;
  }
  std::printf("mpi_convert: wrote %zu floats to %s\n", elems, path.c_str());
  return 0;
}

// This rank's part, on either backend: the conversion, then its sum.
template <template <class...> class Pipe>
std::int64_t convert_share(const std::string& in, const std::string& out, const chunkpipe::Shard& mine) {
  Pipe<chunkpipe::Map<Quantise>> convert(chunkpipe::Options{}, chunkpipe::Map<Quantise>{});
  convert.run(chunkpipe::file_source<float>(in, {mine.first, mine.count}),
              chunkpipe::file_sink<std::int16_t>(
                  out, {.temporary = false, .sync = false, .first = mine.first, .shared = true}));
  Pipe<chunkpipe::Map<QuantiseWide>, chunkpipe::Reduce<std::int64_t, Plus>> fold(
      chunkpipe::Options{}, chunkpipe::Map<QuantiseWide>{}, chunkpipe::Reduce<std::int64_t, Plus>{0, Plus{}, segment});
  return fold.run(chunkpipe::file_source<float>(in, {mine.first, mine.count}));
}

int run(int argc, char** argv) {
  std::string in, out, made;
  std::size_t elems = 0;
  bool host = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--in") in = next();
    else if (a == "--out") out = next();
    else if (a == "--host") host = true;
    else if (a == "--make-input") made = next();
    else if (a == "--elems") elems = std::strtoull(next().c_str(), nullptr, 10);
    else throw std::runtime_error("unknown argument " + a +
                                  " (use --in F --out F [--host], or --make-input F --elems N)");
  }
  if (!made.empty()) return make_input(made, elems);
  if (in.empty() || out.empty()) throw std::runtime_error("--in and --out are needed");

  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (!host) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      if (rank == 0) std::printf("mpi_convert: no CUDA device; run with --host to use the host backend\n");
      return 77;
    }
    // Ranks on one node take its GPUs in turn.
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    int local = 0;
    MPI_Comm_rank(node, &local);
    MPI_Comm_free(&node);
    CHUNKPIPE_CUDA_TRY(cudaSetDevice(local % devices));
  }

  // Every rank sees the same input length; rank 0 creates the output so
  // that every writer finds it, then all write their own ranges.
  std::uint64_t n = 0;
  {
    std::ifstream f(in, std::ios::binary | std::ios::ate);
    if (!f) throw std::runtime_error("cannot open " + in);
    n = static_cast<std::uint64_t>(f.tellg()) / sizeof(float);
  }
  if (rank == 0) {
    std::ofstream made_empty(out, std::ios::binary | std::ios::trunc);
    if (!made_empty) throw std::runtime_error("cannot create " + out);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const chunkpipe::Shard mine = chunkpipe::shard(static_cast<std::size_t>(n), rank, size, segment);
  const double t0 = MPI_Wtime();
  const std::int64_t partial = host ? convert_share<chunkpipe::HostPipeline>(in, out, mine)
                                    : convert_share<chunkpipe::ChunkedPipeline>(in, out, mine);
  const double seconds = MPI_Wtime() - t0;
  // Every element of this rank's range, read back and checked against the
  // host's own conversion of the input, and the sum with it.
  std::size_t wrong = 0;
  long long check_sum = 0;
  {
    std::ifstream fi(in, std::ios::binary), fo(out, std::ios::binary);
    fi.seekg(static_cast<std::streamoff>(mine.first * sizeof(float)));
    fo.seekg(static_cast<std::streamoff>(mine.first * sizeof(std::int16_t)));
    std::vector<float> x(1 << 20);
    std::vector<std::int16_t> q(1 << 20);
    for (std::size_t done = 0; done < mine.count;) {
      const std::size_t k = std::min(x.size(), mine.count - done);
      fi.read(reinterpret_cast<char*>(x.data()), static_cast<std::streamsize>(k * sizeof(float)));
      fo.read(reinterpret_cast<char*>(q.data()), static_cast<std::streamsize>(k * sizeof(std::int16_t)));
      if (!fi || !fo) throw std::runtime_error("could not read back elements " + std::to_string(mine.first + done));
      for (std::size_t i = 0; i < k; ++i) {
        wrong += q[i] == Quantise{}(x[i]) ? 0 : 1;
        check_sum += Quantise{}(x[i]);
      }
      done += k;
    }
  }
  if (wrong != 0 || check_sum != partial) {
    std::fprintf(stderr, "mpi_convert: rank %d: %zu wrong elements, sum %lld against %lld\n", rank, wrong,
                 static_cast<long long>(partial), check_sum);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  long long mine_sum = partial, total = 0;
  MPI_Reduce(&mine_sum, &total, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  double slowest = 0;
  MPI_Reduce(&seconds, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  std::printf("rank %d of %d: elements %zu to %zu, %.3f s, sum %lld, every element checked\n", rank, size,
              mine.first, mine.first + mine.count, seconds, mine_sum);
  if (rank == 0) {
    std::printf("checksum %lld (%llu elements, %d ranks, %s, slowest rank %.3f s)\n", total,
                static_cast<unsigned long long>(n), size, host ? "host backend" : "GPU", slowest);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int status = 1;
  try {
    status = run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpi_convert: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return status;
}
