// SPDX-License-Identifier: MIT
// NVTX ranges in a "chunkpipe" domain, for Nsight Systems, through the C++
// API that ships with CUDA (nvtx3/nvtx3.hpp). Define CHUNKPIPE_DISABLE_NVTX
// to compile them out entirely.
//
// Every name is a registered string, made once, and a range's number (the
// chunk, the run) travels as its payload: an op formats nothing.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>

#ifndef CHUNKPIPE_DISABLE_NVTX
// A header-only library uses NVTX's versioned names only, so a program that
// includes another version of nvtx3.hpp, or wants the unversioned names
// itself, is not disturbed (nvtx3.hpp's own advice for headers).
#ifndef NVTX3_CPP_REQUIRE_EXPLICIT_VERSION
#define NVTX3_CPP_REQUIRE_EXPLICIT_VERSION
#define CHUNKPIPE_NVTX_UNDEF_EXPLICIT
#endif
#include <nvtx3/nvtx3.hpp>
#ifdef CHUNKPIPE_NVTX_UNDEF_EXPLICIT
#undef NVTX3_CPP_REQUIRE_EXPLICIT_VERSION
#undef CHUNKPIPE_NVTX_UNDEF_EXPLICIT
#endif
#endif

namespace chunkpipe::detail {

#ifndef CHUNKPIPE_DISABLE_NVTX
/// The NVTX domain every chunkpipe range is in.
struct NvtxDomain {
  static constexpr const char* name{"chunkpipe"};
};

/// A name registered once with NVTX.
class NvtxName {
 public:
  NvtxName() = default;
  explicit NvtxName(const char* text) : name_(std::in_place, text) {}
  const nvtx3::v1::registered_string_in<NvtxDomain>* get() const noexcept { return name_ ? &*name_ : nullptr; }

 private:
  std::optional<nvtx3::v1::registered_string_in<NvtxDomain>> name_;
};

/// A range on the calling thread, named `name`, with `number` as payload.
class NvtxRange {
 public:
  NvtxRange(const NvtxName& name, std::uint64_t number) noexcept
      : range_(name.get() ? nvtx3::v1::event_attributes{*name.get(), nvtx3::v1::payload{number}}
                          : nvtx3::v1::event_attributes{nvtx3::v1::payload{number}}) {}
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;

 private:
  nvtx3::v1::scoped_range_in<NvtxDomain> range_;
};
#else
class NvtxName {
 public:
  NvtxName() = default;
  explicit NvtxName(const char*) noexcept {}
};
class NvtxRange {
 public:
  NvtxRange(const NvtxName&, std::uint64_t) noexcept {}
};
#endif

}  // namespace chunkpipe::detail
