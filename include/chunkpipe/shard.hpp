// SPDX-License-Identifier: MIT
/// \file
/// Sharding: which part of a range of elements one of several processes
/// (MPI ranks, or any workers that know their index and count) takes.
/// Host-only, no CUDA, no MPI: the caller says who it is.
///
/// \code
/// const chunkpipe::Shard mine = chunkpipe::shard(n, rank, size);
/// auto in  = chunkpipe::file_source<float>(path, {mine.first, mine.count});
/// auto out = chunkpipe::file_sink<float>(out_path, {.temporary = false, .first = mine.first, .shared = true});
/// // (one process makes out_path empty before any writes: a shared sink never truncates)
/// \endcode
#pragma once

#include <chunkpipe/errors.hpp>

#include <cstddef>
#include <string>

namespace chunkpipe {

/// A contiguous share of a range: elements [first, first + count).
struct Shard {
  std::size_t first = 0;  ///< index of the share's first element
  std::size_t count = 0;  ///< elements in the share (0: an empty share)
};

/// Share `rank` of `size` shares of `n` elements: contiguous, in rank
/// order, covering [0, n) exactly once, as even as whole `multiple`s allow
/// (every share starts on a multiple of it, so a Reduce's segments or a
/// record's elements are never split between two processes; only the last
/// share may end off one). Shares differ by at most one `multiple`; when
/// there are fewer multiples than ranks, the first ranks get empty shares.
/// Never blocks. Throws config_error for size < 1, a rank outside
/// [0, size), or a multiple of 0.
inline Shard shard(std::size_t n, int rank, int size, std::size_t multiple = 1) {
  if (size < 1) throw config_error("chunkpipe: shard: size must be at least 1 (got " + std::to_string(size) + ")");
  if (rank < 0 || rank >= size) {
    throw config_error("chunkpipe: shard: rank " + std::to_string(rank) + " is not in [0, " + std::to_string(size) +
                       ")");
  }
  if (multiple == 0) throw config_error("chunkpipe: shard: multiple must be at least 1 (got 0)");
  if (n == static_cast<std::size_t>(-1)) {
    throw config_error("chunkpipe: shard: n must be a length (got unknown_length)");
  }
  const std::size_t units = n / multiple + (n % multiple != 0 ? 1 : 0);
  const auto r = static_cast<std::size_t>(rank), s = static_cast<std::size_t>(size);
  // The last `extra` ranks take one unit more: the last unit may be short,
  // and its rank is then among the larger shares.
  const std::size_t base = units / s, extra = units % s, from = s - extra;
  const std::size_t first_unit = r * base + (r > from ? r - from : 0);
  const std::size_t my_units = base + (r >= from && extra != 0 ? 1 : 0);
  // In units first, so that multiplying never passes n (nor overflows).
  auto at = [&](std::size_t unit) { return unit >= units ? n : unit * multiple; };
  Shard out;
  out.first = at(first_unit);
  out.count = at(first_unit + my_units) - out.first;
  return out;
}

}  // namespace chunkpipe
