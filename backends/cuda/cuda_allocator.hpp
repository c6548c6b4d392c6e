// GPU memory of one CUDA device, from cudaMalloc / cudaFree.
//
// A logical device that shares its GPU with others (registry.hpp) has a
// budget: an allocation that would take its bytes in use past it fails as
// out of memory does, so one device cannot starve the others.
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
  // `gpu`: the CUDA ordinal; `budget`: the most bytes in use at once (0: no limit).
  CudaAllocator(Device device, int gpu, std::size_t budget = 0);
  std::size_t budget() const { return budget_; }

 protected:
  // nullptr on cudaErrorMemoryAllocation; throws on any other error.
  void* raw_allocate(std::size_t bytes) override;
  // cudaFree (which waits for the device's pending work); errors are dropped,
  // as this runs from destructors, possibly after the runtime shut down at exit.
  void raw_deallocate(void* ptr, std::size_t bytes) override;
  std::string limit_note() const override;

 private:
  int gpu_;
  std::size_t budget_;
};

}  // namespace tessera
