// GPU memory of one CUDA device, from cudaMalloc / cudaFree.
//
// cudaMalloc returns memory aligned to at least 256 bytes (the 64 that
// Allocator promises). Out of memory is reported by the base class (an Error
// naming the device and the bytes asked for); any other CUDA failure throws the
// CUDA error. This header has no CUDA includes, so tests can name the class.
#pragma once

#include "engine/core/allocator.hpp"

namespace tessera {

class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(Device device);

 protected:
  // nullptr on cudaErrorMemoryAllocation; throws on any other error.
  void* raw_allocate(std::size_t bytes) override;
  // cudaFree (which waits for the device's pending work); errors are dropped,
  // as this runs from destructors, possibly after the runtime shut down at exit.
  void raw_deallocate(void* ptr, std::size_t bytes) override;
};

}  // namespace tessera
