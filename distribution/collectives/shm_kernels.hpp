// Memory kernels of the shared-memory collectives: element-wise reductions of
// several buffers into several buffers, and copies of one buffer into several,
// each in one pass that reads every source byte once.
//
// Large collectives are bound by memory bandwidth, so the kernels keep many
// streams in flight (every source and destination advances together, a cache
// line at a time) and, with `stream`, write with non-temporal stores: no read
// of each destination line before it is overwritten, and no eviction of the
// data still to be read. AVX-512 machines run hand-vectorised kernels that
// store whole cache lines; others run portable loops over 64 KiB chunks.
// One instance per thread: the portable reduction accumulates in its buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "backends/op_kinds.hpp"
#include "engine/core/dtype.hpp"

namespace tessera {

class ShmKernels {
 public:
  // Whether this CPU runs the AVX-512 kernels.
  static bool avx512_available();
  // `avx512` false: the portable kernels (tests compare the two).
  explicit ShmKernels(bool avx512 = avx512_available());

  // dsts[j][i] = op over k (in order) of srcs[k][i], for i < count and every j.
  // f32 and bf16 accumulate in f32 (mean divides the sum by srcs.size());
  // i32 and i64 support sum and max. A destination may be one of the sources
  // (in place): each element is read from every source before it is written.
  void reduce(std::span<const void* const> srcs, std::span<void* const> dsts, std::int64_t count, DType dtype,
              ReduceOp op, bool stream);

  // dsts[j][0, bytes) = src[0, bytes) for every j; src is read once.
  void copy(const void* src, std::span<void* const> dsts, std::size_t bytes, bool stream) const;

  // Copies a block of shape `dims` between two row-major arrays with the
  // given strides (in elements of `element_size` bytes), a contiguous run at
  // a time.
  void copy_strided(void* dst, const std::vector<std::int64_t>& dst_strides, const void* src,
                    const std::vector<std::int64_t>& src_strides, const std::vector<std::int64_t>& dims,
                    std::size_t element_size, bool stream) const;

  // Orders this thread's non-temporal stores before its later stores (the
  // barrier that tells the peers the data is there).
  static void store_fence();

 private:
  bool avx512_;
  // Accumulators of the portable reduction, a chunk of each type.
  std::vector<float> f32_;  // f32 and bf16 accumulate in f32
  std::vector<std::int32_t> i32_;
  std::vector<std::int64_t> i64_;
  std::vector<std::uint16_t> bf16_;  // a bf16 result, rounded once
};

}  // namespace tessera
