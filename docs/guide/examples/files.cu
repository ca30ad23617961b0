// SPDX-License-Identifier: MIT
// A file of float32 converted to float16 through the GPU, file to file. The
// file source reads each chunk straight into a pinned slot and the file sink
// writes each chunk from one, so neither file has to fit in host memory.
#include <chunkpipe/files.hpp>
#include <chunkpipe/pipeline.cuh>

#include <cuda_fp16.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

struct ToHalf {
  CHUNKPIPE_HOST_DEVICE __half operator()(float v) const { return __float2half_rn(v); }
};

float value(std::size_t i) { return static_cast<float>(i % 4099) * 0.37f - 700.0f; }

// The whole file as bytes.
std::vector<char> read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

int main() {
  try {
    const std::filesystem::path dir = std::filesystem::temp_directory_path();
    const std::string in = (dir / "chunkpipe_guide.f32").string();
    const std::string out = (dir / "chunkpipe_guide.f16").string();
    const std::string out2 = (dir / "chunkpipe_guide_generated.f16").string();
    const std::size_t n = (std::size_t{24} << 20) + 7;

    {  // The input: n float32 values, native byte order, no header.
      std::vector<float> v(n);
      for (std::size_t i = 0; i < n; ++i) v[i] = value(i);
      std::ofstream f(in, std::ios::binary);
      f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(n * sizeof(float)));
    }

    auto convert = chunkpipe::make_pipeline(chunkpipe::Options{}, chunkpipe::map(ToHalf{}));

    // file_source opens the file now and throws pipeline_error, naming it,
    // if it cannot be read. file_sink writes `out.partial` and renames it
    // to `out` only when the run succeeds. A sink handle writes one run.
    convert.run(chunkpipe::file_source<float>(in), chunkpipe::file_sink<__half>(out));

    // A Source need not be a file: generate<T>(n, fn) computes element i as
    // fn(i) on a chunkpipe thread, as chunks are needed.
    convert.run(chunkpipe::generate<float>(n, value), chunkpipe::file_sink<__half>(out2));

    // Both outputs against the host's conversion, bit for bit.
    std::vector<__half> want(n);
    for (std::size_t i = 0; i < n; ++i) want[i] = ToHalf{}(value(i));
    const std::vector<char> a = read_all(out), b = read_all(out2);
    const std::size_t bytes = n * sizeof(__half);
    const bool ok = a.size() == bytes && b.size() == bytes && std::memcmp(a.data(), want.data(), bytes) == 0 &&
                    std::memcmp(b.data(), want.data(), bytes) == 0;
    for (const std::string& path : {in, out, out2}) std::filesystem::remove(path);
    std::printf("%zu floats to float16, from a file and from a generator: %s\n", n, ok ? "as on the host" : "WRONG");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
