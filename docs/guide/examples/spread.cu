// SPDX-License-Identifier: MIT
// One run spread over several GPUs, and the share of a range one of several
// processes takes.
#include <chunkpipe/pipeline.cuh>
#include <chunkpipe/shard.hpp>

#include <cstdio>
#include <exception>
#include <vector>

struct Twice {
  CHUNKPIPE_HOST_DEVICE float operator()(float v) const { return 2.0f * v; }
};

int main() {
  try {
    int gpus = 0;
    CHUNKPIPE_CUDA_TRY(cudaGetDeviceCount(&gpus));
    // One member pipeline per entry. With one GPU, list it twice: two
    // members with their own slots, streams and threads share its link.
    chunkpipe::Options options;
    for (int d = 0; d < gpus; ++d) options.devices.push_back(d);
    if (gpus == 1) options.devices.push_back(0);
    chunkpipe::SpreadPipeline<chunkpipe::Map<Twice>> spread(options, chunkpipe::map(Twice{}));

    const std::size_t n = std::size_t{64} << 20;
    chunkpipe::PinnedArray<float> x(n), y(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % 1000);

    // Each member takes the next piece of the run when it has room, so a
    // slower link or a busier GPU takes fewer. Outputs land in place.
    const chunkpipe::SpreadSummary s = spread.run(chunkpipe::pinned(x), chunkpipe::pinned(y));
    std::printf("%zu elements in %zu chunks; pieces per member:", s.elems, s.chunks);
    for (std::size_t p : s.pieces) std::printf(" %zu", p);
    std::printf("\n");

    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) wrong += y[i] != 2.0f * x[i];

    // Several processes (MPI ranks, say) each take a contiguous share;
    // file_source and file_sink read and write just that part of a file.
    // Shares start on multiples of the last argument: a Reduce's segment.
    for (int rank = 0; rank < 3; ++rank) {
      const chunkpipe::Shard share = chunkpipe::shard(n, rank, 3, chunkpipe::default_reduce_segment);
      std::printf("rank %d of 3: elements [%zu, %zu)\n", rank, share.first, share.first + share.count);
    }
    std::printf("%zu wrong\n", wrong);
    return wrong == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
