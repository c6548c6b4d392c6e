// Host memory kernels of the shared-memory collectives (shared_memory_kernels.hpp):
// element-wise reductions of several buffers into several buffers, and copies
// of one buffer into several, each in one pass that reads every source byte once.
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

#include "distribution/collectives/shared_memory_kernels.hpp"

namespace tessera {

class ShmKernels final : public SharedMemoryKernels {
 public:
  // Whether this CPU runs the AVX-512 kernels.
  static bool avx512_available();
  // `avx512` false: the portable kernels (tests compare the two).
  explicit ShmKernels(bool avx512 = avx512_available());

  bool reaches(Device device) const override { return device.kind == DeviceKind::cpu; }
  std::string memory_name() const override { return "host tensors"; }

  void reduce(std::span<const void* const> srcs, std::span<void* const> dsts, std::int64_t count, DType dtype,
              ReduceOp op, bool stream) override;
  // src is read once.
  void copy(const void* src, std::span<void* const> dsts, std::size_t bytes, bool stream) override;
  // Streamed (non-temporal) stores are ordered before the barrier's.
  void after_writes(bool streamed) override {
    if (streamed) store_fence();
  }

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
