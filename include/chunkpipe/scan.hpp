// SPDX-License-Identifier: MIT
/// \file
/// The Scan stage: an inclusive prefix over a whole run, whose running
/// value passes from chunk to chunk, so that a file larger than the GPU
/// gets its running totals while copies still overlap. Everything a Scan
/// is lives here: its type, its traits, the order it combines in, its run
/// on the host backend and (compiled by nvcc) its kernels. The engine finds
/// it through its stage_kind specialisation; the umbrella
/// <chunkpipe/pipeline.cuh> and <chunkpipe/host_backend.hpp> include it.
///
/// \code
/// // y[i] = x[0] + ... + x[i], for a run of any length
/// chunkpipe::ChunkedPipeline<chunkpipe::Scan<double, Plus>> pipe(chunkpipe::scan(0.0, Plus{}));
/// pipe.run(x, y);
/// \endcode
#pragma once

#include <chunkpipe/stage.hpp>
#include <chunkpipe/detail/slots.hpp>  // StageExtras

#include <cuda/std/span>

#include <cstddef>
#include <tuple>
#include <type_traits>

#if defined(__CUDACC__)
#include <chunkpipe/cuda_error.cuh>
#include <chunkpipe/detail/map_kernel.cuh>  // CHUNKPIPE_KERNEL
#include <cuda_runtime_api.h>
#endif

namespace chunkpipe {

/// Elements a Scan combines in one fixed order unless told otherwise.
inline constexpr std::size_t default_scan_segment = 16384;

/// Inclusive prefix stage: output element i is init op x[0] op ... op x[i]
/// over the whole run, each element converted to T, with `op` an
/// associative functor callable on the device and the host
/// (CHUNKPIPE_HOST_DEVICE T operator()(T, T) const). Takes one input; one
/// output of T per element; any position in the pipeline.
///
/// The order of combination is fixed by the element sequence alone, as a
/// Reduce's is: the run is cut into segments of `segment` elements from
/// its start; a segment into 256 lanes of ceil(segment / 256) consecutive
/// elements, each lane a running left fold; a lane's values then take the
/// fold of the lanes before it on their left, and every value of segment k
/// takes, on its left, the carry: init folded left to right with the
/// totals of segments 0 to k - 1. Every policy, depth, grain and executor
/// therefore gives the same bits, as long as chunks are whole segments (a
/// config_error says so otherwise); the host backend gives them too where
/// op rounds alike on both sides.
///
/// The carry passes from each chunk's stage op to the next chunk's: a wait
/// the plan derives (PlanShape::carries), which check_hazards() proves and
/// simulate() models. Kernels of consecutive chunks so run one after the
/// other while the copies of other chunks overlap them. A run cannot be
/// spread over several pipelines (SpreadPipeline) yet. T must be trivially
/// copyable and at most 64 bytes: a segment's kernel keeps 512 of them in
/// shared memory. A segment of at least 256 elements keeps the device busy
/// (smaller ones work, one busy thread a block).
template <class T, class Op>
struct Scan {
  T init{};  ///< folded in first, left of every element
  Op op{};   ///< the associative combining functor: op(T, T) -> T
  std::size_t segment = default_scan_segment;  ///< elements combined in one fixed order per segment
};

/// Scan<T, Op> from an initial value and an operator:
/// chunkpipe::scan(0.0, Plus{}), or with a segment of its own.
template <class T, class Op>
Scan<T, Op> scan(T init, Op op, std::size_t segment = default_scan_segment) {
  return Scan<T, Op>{std::move(init), std::move(op), segment};
}

namespace detail {

template <class T, class Op, class... I>
struct stage_io<Scan<T, Op>, types<I...>> {
  static_assert(sizeof...(I) == 1, "chunkpipe::Scan takes one input; put a Map before it to combine several");
  static_assert(std::is_trivially_copyable_v<T>, "chunkpipe::Scan: the value type must be trivially copyable");
  static_assert(std::is_trivially_copyable_v<Op>, "chunkpipe::Scan: the operator must be trivially copyable");
  static_assert(sizeof(T) <= 64, "chunkpipe::Scan: the value type must be at most 64 bytes (a segment's kernel keeps "
                                 "512 of them in shared memory)");
  using in = types<I...>;
  using out = types<T>;
  static constexpr bool in_place = false;
  static constexpr bool elementwise = false;
};

template <class T, class Op>
struct stage_kind<Scan<T, Op>> {
  static constexpr bool own_header = true;
  static constexpr bool carries = true;
  using carry = T;
  static constexpr const char* name = "Scan";
};

/// Lanes (CUDA threads) of one segment.
inline constexpr unsigned scan_threads = 256;

/// Elements of one lane: fixed by the segment, not by the chunk.
inline std::size_t scan_lane(std::size_t segment) noexcept { return (segment + scan_threads - 1) / scan_threads; }

/// One chunk of a Scan on the host, in the order the device combines:
/// `count` elements of `in` (run elements from `offset`) into `out`.
/// `carry` holds the running value (carry[0]) and room for one value per
/// segment of the chunk after it. Chunk 0 of a run starts from init.
template <class T, class Op, class I>
void scan_chunk(const Scan<T, Op>& st, const I* in, std::size_t count, std::size_t offset, T* out, T* carry) {
  if (count == 0) return;
  const std::size_t seg = st.segment, q = scan_lane(seg);
  T c = offset == 0 ? st.init : carry[0];
  for (std::size_t base = 0; base < count; base += seg) {
    const std::size_t len = count - base < seg ? count - base : seg;
    const std::size_t lanes = (len + q - 1) / q;
    // Lane 0's running fold, then each later lane's values take `pre`, the
    // fold of the lanes before it, on their left; `pre` ends as the
    // segment's total. The device folds lane totals this way
    // (scan_segments_kernel). No T is default-constructed.
    T pre = static_cast<T>(in[base]);
    out[base] = pre;
    for (std::size_t j = base + 1; j < base + (len < q ? len : q); ++j) out[j] = pre = st.op(pre, static_cast<T>(in[j]));
    for (std::size_t t = 1; t < lanes; ++t) {
      const std::size_t lo = base + t * q, hi = lo + q < base + len ? lo + q : base + len;
      T acc = static_cast<T>(in[lo]);
      out[lo] = acc;
      for (std::size_t j = lo + 1; j < hi; ++j) out[j] = acc = st.op(acc, static_cast<T>(in[j]));
      for (std::size_t j = lo; j < hi; ++j) out[j] = st.op(pre, out[j]);
      pre = st.op(pre, acc);
    }
    for (std::size_t j = base; j < base + len; ++j) out[j] = st.op(c, out[j]);
    c = st.op(c, pre);
  }
  carry[0] = c;
}

/// The host backend's run of a Scan's chunk (found through StageKind).
template <class T, class Op, class I>
void run_stage_kind(StageKind, Scan<T, Op>& st, const std::tuple<::cuda::std::span<I>>& ins,
                    const std::tuple<::cuda::std::span<T>>& outs, std::size_t, std::size_t offset, std::size_t count,
                    const StageExtras& x) {
  ::chunkpipe::detail::scan_chunk(st, std::get<0>(ins).data(), count, offset, std::get<0>(outs).data(),
                                  reinterpret_cast<T*>(x.carry));
}

#if defined(__CUDACC__)
#ifdef __NVCC__
#pragma nv_diagnostic push
#pragma nv_diag_suppress 1407
#endif
/// One block of scan_threads per segment: the segment's values before the
/// carry, into `out`, and its total into totals[k].
template <class T, class Op, class I>
CHUNKPIPE_KERNEL void scan_segments_kernel(Op op, const I* in, std::size_t n, std::size_t segment, T* out,
                                           T* totals) {
  // Raw storage: T need not be trivially default-constructible on the device.
  __shared__ alignas(T) unsigned char raw_tot[scan_threads * sizeof(T)];
  __shared__ alignas(T) unsigned char raw_pre[scan_threads * sizeof(T)];
  T* tot = reinterpret_cast<T*>(raw_tot);
  T* pre = reinterpret_cast<T*>(raw_pre);
  const std::size_t base = blockIdx.x * segment;
  const std::size_t len = n - base < segment ? n - base : segment;
  const std::size_t q = (segment + scan_threads - 1) / scan_threads;
  const std::size_t lanes = (len + q - 1) / q;
  const unsigned t = threadIdx.x;
  const std::size_t lo = base + t * q;
  const std::size_t hi = lo + q < base + len ? lo + q : base + len;
  if (t < lanes) {
    T acc = static_cast<T>(in[lo]);
    out[lo] = acc;
    for (std::size_t j = lo + 1; j < hi; ++j) out[j] = acc = op(acc, static_cast<T>(in[j]));
    tot[t] = acc;
  }
  __syncthreads();
  if (t == 0) {
    // Left to right, as scan_chunk: pre[u] folds lanes 0 to u - 1.
    T p = tot[0];
    for (std::size_t u = 1; u < lanes; ++u) {
      pre[u] = p;
      p = op(p, tot[u]);
    }
    totals[blockIdx.x] = p;
  }
  __syncthreads();
  if (t > 0 && t < lanes) {
    const T p = pre[t];
    for (std::size_t j = lo; j < hi; ++j) out[j] = op(p, out[j]);
  }
}

/// One thread: totals[k] becomes the carry into segment k (init, or the
/// chunk before's carry, folded with the totals before k), and carry[0]
/// the carry out of the chunk.
template <class T, class Op>
CHUNKPIPE_KERNEL void scan_carry_kernel(Op op, T init, bool first, T* carry, T* totals, std::size_t segments) {
  T c = first ? init : carry[0];
  for (std::size_t k = 0; k < segments; ++k) {
    const T total = totals[k];
    totals[k] = c;
    c = op(c, total);
  }
  carry[0] = c;
}

/// out[i] = op(carry into i's segment, out[i]).
template <class T, class Op>
CHUNKPIPE_KERNEL void scan_apply_kernel(Op op, T* out, std::size_t n, std::size_t segment, const T* prefix) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    out[i] = op(prefix[i / segment], out[i]);
  }
}
#ifdef __NVCC__
#pragma nv_diagnostic pop
#endif

/// A Scan's chunk on `stream`: three kernels (segments, carry, apply).
/// Throws cuda_error if a launch fails.
template <class T, class Op, class I>
void launch_stage_kind(StageKind, Scan<T, Op>& st, const std::tuple<::cuda::std::span<I>>& ins,
                       const std::tuple<::cuda::std::span<T>>& outs, std::size_t, std::size_t offset,
                       std::size_t count, cudaStream_t stream, const StageExtras& x) {
  if (count == 0) return;
  T* carry = reinterpret_cast<T*>(x.carry);
  T* out = std::get<0>(outs).data();
  const std::size_t segments = (count + st.segment - 1) / st.segment;
  scan_segments_kernel<T><<<static_cast<unsigned>(segments), scan_threads, 0, stream>>>(
      st.op, std::get<0>(ins).data(), count, st.segment, out, carry + 1);
  CHUNKPIPE_CUDA_TRY(cudaGetLastError());
  scan_carry_kernel<T><<<1, 1, 0, stream>>>(st.op, st.init, offset == 0, carry, carry + 1, segments);
  CHUNKPIPE_CUDA_TRY(cudaGetLastError());
  constexpr unsigned threads = 256;
  const std::size_t want = (count + threads - 1) / threads;
  const unsigned blocks = static_cast<unsigned>(want < 4096 ? want : 4096);
  scan_apply_kernel<T><<<blocks, threads, 0, stream>>>(st.op, out, count, st.segment, carry + 1);
  CHUNKPIPE_CUDA_TRY(cudaGetLastError());
}
#endif

}  // namespace detail
}  // namespace chunkpipe
