// SPDX-License-Identifier: MIT
// What a spread (detail/spread.hpp) asks of its member pipelines and of
// its options, apart from running them: which member kinds and stages it
// takes (spread_member, member_front), how a folding run gets a fresh
// Folding, the host backend's piece buffer, and the options' checks and
// copy team. Kept apart from SpreadEngine so that the engine's file
// holds the engine.
#pragma once

#include <chunkpipe/errors.hpp>
#include <chunkpipe/host_copy.hpp>
#include <chunkpipe/io.hpp>  // Memory
#include <chunkpipe/options.hpp>
#include <chunkpipe/result.hpp>  // Folding, fold_traits
#include <chunkpipe/stage.hpp>
#include <chunkpipe/detail/copy_team.hpp>  // SharedCopyTeam
#include <chunkpipe/detail/front.hpp>
#include <chunkpipe/detail/resource_buffer.hpp>
#include <chunkpipe/detail/slots.hpp>  // slot_alignment

#include <cstddef>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>

namespace chunkpipe::detail {

/// A piece buffer in host memory, for members on the host backend: from
/// `pinned` (Options::pinned_memory) or operator new where it is null,
/// zeroed.
template <class T>
struct HostPieceBuffer {
  static constexpr Memory memory = Memory::pinned;  // to the host backend: copied directly
  HostPieceBuffer(std::size_t n, std::shared_ptr<MemoryResource> pinned)
      : buffer(host_buffer(std::move(pinned), n * sizeof(T), slot_alignment, "a spread's piece buffer")) {
    if (buffer.data() != nullptr) std::memset(buffer.data(), 0, buffer.size());
  }
  T* data() noexcept { return reinterpret_cast<T*>(buffer.data()); }
  ResourceBuffer buffer;
};

/// Whether a stage is a ChunkFn (not an Emit, which emits a count).
template <class Stage>
struct is_chunk_fn : std::false_type {};
template <class F, class... X>
struct is_chunk_fn<ChunkFn<F, X...>> : std::true_type {};

/// What a spread needs of its members' kind, specialised next to each
/// member pipeline (ChunkedPipeline: chunked_pipeline.cuh; HostPipeline:
/// host_backend.hpp):
///   template <class T> using piece_buffer = ...;  // SpreadEngine's Buffer
///   using order = ...;  // what that backend's after(...) gives
///   static void share_copy_team(Member&, std::shared_ptr<SharedCopyTeam>);
///     // the member's staged copies go to the spread's one team (or not:
///     // a backend that stages nothing ignores it)
/// and RunAccess::hold(member, order) takes such an order when a run is
/// queued, as a wait for the spread's thread.
template <class Member>
struct spread_member;

/// SpreadEngine<Member, Buffer>: see the top of this file; chunkpipe::Spread
/// (spread.hpp) is its public face. Member is a pipeline type
/// (ChunkedPipeline<S...> or HostPipeline<S...>) of Map, ChunkFn, record,
/// Filter or Emit stages (a ChunkFn sees the spread run's chunk numbers and
/// offsets, as with one pipeline); Buffer<T> is a piece buffer:
/// constructible from an element count and the pinned MemoryResource
/// (Options::pinned_memory, may be null), with data() and a static Memory
/// `memory` saying how it is held (pinned memory for a GPU member).
template <class M>
struct member_front;
template <template <class...> class P, class... S>
struct member_front<P<S...>> {
  using type = PipelineFront<S...>;
  // A record stage, a Filter or an Emit is the last (PipelineFront checks).
  static constexpr bool spreadable = ((is_elementwise<S>::value || is_chunk_fn<S>::value ||
                                       records_of<S>::value != Records::per_element || stage_kind<S>::carries) &&
                                      ...);
  /// A stage carries a value from chunk to chunk (a Scan): each run's
  /// pieces stay on one member, whose schedule passes the carry on.
  static constexpr bool carries = (stage_kind<S>::carries || ...);
};

/// What makes a fresh Folding for each run of a folding spread (int for
/// the others).
template <class Stage, bool Folds = folds<Stage>::value>
struct folding_maker {
  using type = int;
};
template <class Stage>
struct folding_maker<Stage, true> {
  using type = std::function<std::shared_ptr<Folding<typename fold_traits<Stage>::result>>()>;
};

/// Throws config_error unless `options` can make a spread: Options that
/// one pipeline takes, with devices listed, device left at -1 and staging
/// other than registered.
inline void validate_spread_options(const Options& options) {
  validate_options(options);
  if (options.devices.empty()) {
    throw config_error("chunkpipe: a spread pipeline needs Options::devices (one entry per member pipeline)");
  }
  if (options.device != -1) {
    throw config_error("chunkpipe: a spread pipeline takes its devices from Options::devices; leave "
                       "Options::device at -1 (got " + std::to_string(options.device) + ")");
  }
  if (options.staging == Staging::registered) {
    throw config_error("chunkpipe: a spread pipeline does not take Staging::registered; register the ranges "
                       "yourself (cudaHostRegister) and mark them pinned, or let it stage");
  }
}

/// Threads a spread's copy team takes where Options::host_threads is 0:
/// measure_host_copy().team() (host_copy.hpp), measured once per process,
/// by the first caller while the others wait. Where the measurement
/// cannot be made (no memory for its buffers, no thread to start), twice
/// default_host_threads(), what a spread took before it measured, for the
/// rest of the process too. Never throws.
inline int measured_copy_threads() noexcept {
  static std::mutex mutex;
  static int threads = 0;
  std::lock_guard<std::mutex> lock(mutex);
  if (threads == 0) {
    try {
      threads = measure_host_copy().team();
    } catch (...) {
      threads = 2 * ::chunkpipe::default_host_threads();
    }
  }
  return threads;
}

/// A spread's one copy team (SharedCopyTeam), which every member's staged
/// copies and positional reads and writes and the deliverer's copies
/// share: the host's memory, not the members, bounds staged runs, and
/// teams of each member's own would multiply the threads, not the
/// bandwidth. Where Options::host_threads is set, the spread's own team of
/// twice that (one pipeline's two directions); where it is 0, the
/// process's one team, which every such spread shares while any holds it,
/// sized by measured_copy_threads() when it is first used (not here: a
/// spread that never stages never measures). Never blocks; throws
/// std::bad_alloc.
inline std::shared_ptr<SharedCopyTeam> spread_copy_team(const Options& options) {
  if (options.host_threads > 0) return std::make_shared<SharedCopyTeam>(2 * options.host_threads);
  static std::mutex mutex;
  static std::weak_ptr<SharedCopyTeam> process;
  std::lock_guard<std::mutex> lock(mutex);
  std::shared_ptr<SharedCopyTeam> team = process.lock();
  if (!team) {
    team = std::make_shared<SharedCopyTeam>(std::function<int()>(measured_copy_threads));
    process = team;
  }
  return team;
}

}  // namespace chunkpipe::detail
