#include "backends/cuda/cuda_allocator.hpp"

#include "backends/cuda/cuda_check.hpp"
#include "engine/core/error.hpp"

namespace tessera {

CudaAllocator::CudaAllocator(Device device, int gpu, std::size_t budget) : Allocator(device), gpu_(gpu), budget_(budget) {
  if (device.kind != DeviceKind::cuda)
    throw DeviceError("CudaAllocator needs a cuda device, got " + device.str());
}

void* CudaAllocator::raw_allocate(std::size_t bytes) {
  if (budget_ > 0 && static_cast<std::size_t>(stats().bytes_in_use) + bytes > budget_) return nullptr;
  CudaDeviceGuard guard(gpu_);
  void* ptr = nullptr;
  cudaError_t status = cudaMalloc(&ptr, bytes);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky, but clear it so the next call does not see it
    return nullptr;
  }
  cuda_check(status, "cudaMalloc(&ptr, bytes)", __FILE__, __LINE__);
  return ptr;
}

std::string CudaAllocator::limit_note() const {
  if (budget_ == 0) return "";
  return " (this logical device's budget: " + std::to_string(budget_) + " bytes, its share of GPU " +
         std::to_string(gpu_) + ")";
}

void CudaAllocator::raw_deallocate(void* ptr, std::size_t) {
  int previous = -1;
  bool switched = cudaGetDevice(&previous) == cudaSuccess && previous != gpu_ &&
                  cudaSetDevice(gpu_) == cudaSuccess;
  if (cudaFree(ptr) != cudaSuccess) cudaGetLastError();
  if (switched) cudaSetDevice(previous);
}

}  // namespace tessera
