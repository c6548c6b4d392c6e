#include "backends/cuda/cuda_backend.hpp"

#include <cuda_runtime_api.h>

namespace tessera {

int cuda_runtime_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return count;
}

std::unique_ptr<Backend> make_cuda_backend(Device device) {
  throw UnsupportedError("the CUDA backend for " + device.str() + " is not implemented yet");
}

}  // namespace tessera
