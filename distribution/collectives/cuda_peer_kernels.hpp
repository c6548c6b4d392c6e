// CudaPeerKernels: the shared-memory collectives' kernels for the logical
// devices of one GPU (registry.hpp's set_cuda_logical_devices). Their
// buffers are all in the one GPU's memory, so a member reads and writes its
// peers' tensors directly, as logical CPU devices do in host memory:
// reductions are one kernel (backends/cuda/peer_reduce.hpp), copies
// device-to-device copies, each enqueued on this member's own stream.
//
// Ordering: a peer's buffers are written by work on the peer's stream, which
// is not ordered with this one. So a member drains its stream before it shows
// its buffers (before_publish: its inputs are computed, and its earlier reads
// of its outputs are done), and again after its writes (after_writes: they
// are complete before the closing barrier lets the peers go on).
//
// This header has no CUDA includes, so the communicator and tests compile
// against it as plain C++. Built when the build has CUDA.
#pragma once

#include "distribution/collectives/shared_memory_kernels.hpp"

struct CUstream_st;  // cudaStream_t is CUstream_st*

namespace tessera {

class CudaPeerKernels final : public SharedMemoryKernels {
 public:
  // Runs on the stream of `device`'s backend (a cuda device).
  explicit CudaPeerKernels(Device device);

  bool reaches(Device device) const override;
  std::string memory_name() const override;
  void before_publish() override;
  void reduce(std::span<const void* const> srcs, std::span<void* const> dsts, std::int64_t count, DType dtype,
              ReduceOp op, bool stream) override;
  void copy(const void* src, std::span<void* const> dsts, std::size_t bytes, bool stream) override;
  void after_writes(bool streamed) override;

 private:
  void synchronize();

  Device device_;
  int gpu_;
  CUstream_st* stream_;
};

}  // namespace tessera
