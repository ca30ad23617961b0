// SPDX-License-Identifier: MIT
// The range checks of detail/run_sides.hpp that do not depend on the
// ranges' types (included by io.hpp; see linkage.hpp).
#pragma once

#include <chunkpipe/errors.hpp>
#include <chunkpipe/io.hpp>
#include <chunkpipe/detail/linkage.hpp>

#include <cstddef>
#include <string>

namespace chunkpipe::detail {

CHUNKPIPE_INLINE void check_input(std::size_t index, bool null, std::size_t size, std::size_t n) {
  if (size != n) {
    throw config_error("chunkpipe: inputs have different lengths: input 0 has " + std::to_string(n) +
                       " elements, input " + std::to_string(index) + " has " + std::to_string(size));
  }
  if (null && size != 0) {
    throw config_error("chunkpipe: input " + std::to_string(index) + " is a null pointer with " +
                       std::to_string(size) + " elements");
  }
}

CHUNKPIPE_INLINE void check_output(std::size_t index, bool null, std::size_t size, std::size_t n,
                                   std::size_t per_record) {
  if (null && size != 0) {
    throw config_error("chunkpipe: output " + std::to_string(index) + " is a null pointer with " +
                       std::to_string(size) + " elements");
  }
  // per_record 0: the device decides how many elements come out (a
  // Filter), and any length will do; the run says when one was too short.
  if (n == unknown_length || per_record == 0) return;
  const std::size_t need = per_record == 1 ? n : (n + per_record - 1) / per_record;
  if (size < need) {
    throw config_error("chunkpipe: output " + std::to_string(index) + " has " + std::to_string(size) +
                       " elements, fewer than the " +
                       (per_record == 1 ? std::to_string(n) + " input elements"
                                        : std::to_string(need) + " records the run makes (one per " +
                                              std::to_string(per_record) + " input elements)"));
  }
}

}  // namespace chunkpipe::detail
