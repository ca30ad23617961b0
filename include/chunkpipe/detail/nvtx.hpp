// SPDX-License-Identifier: MIT
// NVTX ranges in a "chunkpipe" domain, for Nsight Systems. Define
// CHUNKPIPE_DISABLE_NVTX to compile them out entirely.
#pragma once

#ifndef CHUNKPIPE_DISABLE_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace chunkpipe::detail {

#ifndef CHUNKPIPE_DISABLE_NVTX
struct ChunkpipeDomain {
  static nvtxDomainHandle_t get() {
    static const nvtxDomainHandle_t domain = nvtxDomainCreateA("chunkpipe");
    return domain;
  }
};

/// A push/pop range on the calling thread. The message is copied by NVTX.
class NvtxRange {
 public:
  explicit NvtxRange(const char* message) noexcept {
    nvtxEventAttributes_t a{};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = message;
    nvtxDomainRangePushEx(ChunkpipeDomain::get(), &a);
  }
  ~NvtxRange() { nvtxDomainRangePop(ChunkpipeDomain::get()); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};
#else
class NvtxRange {
 public:
  explicit NvtxRange(const char*) noexcept {}
};
#endif

}  // namespace chunkpipe::detail
