#include "backends/cuda/cuda_allocator.hpp"

#include "backends/cuda/cuda_check.hpp"
#include "engine/core/error.hpp"

namespace tessera {

CudaAllocator::CudaAllocator(Device device) : Allocator(device) {
  if (device.kind != DeviceKind::cuda)
    throw DeviceError("CudaAllocator needs a cuda device, got " + device.str());
}

void* CudaAllocator::raw_allocate(std::size_t bytes) {
  CudaDeviceGuard guard(device().index);
  void* ptr = nullptr;
  cudaError_t status = cudaMalloc(&ptr, bytes);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky, but clear it so the next call does not see it
    return nullptr;
  }
  cuda_check(status, "cudaMalloc(&ptr, bytes)", __FILE__, __LINE__);
  return ptr;
}

void CudaAllocator::raw_deallocate(void* ptr, std::size_t) {
  int previous = -1;
  bool switched = cudaGetDevice(&previous) == cudaSuccess && previous != device().index &&
                  cudaSetDevice(device().index) == cudaSuccess;
  if (cudaFree(ptr) != cudaSuccess) cudaGetLastError();
  if (switched) cudaSetDevice(previous);
}

}  // namespace tessera
