// Checked CUDA runtime and cuBLAS calls, and the current-device guard.
//
//   TESSERA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, stream));
//   TESSERA_CUBLAS_CHECK(cublasSetStream(handle, stream));
//
// A failing call throws tessera::Error naming file:line, the call as written,
// and the library's error name and description, e.g.
//   "CUDA error at backends/cuda/cuda_backend.cpp:42: cudaStreamCreate(&s) failed:
//    cudaErrorInvalidValue (invalid argument)".
// Internal to the CUDA backend: this header includes the CUDA headers.
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>

namespace tessera {

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file,
                                     int line);

inline void cuda_check(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess) throw_cuda_error(status, call, file, line);
}
inline void cublas_check(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) throw_cublas_error(status, call, file, line);
}

// Makes the backend's GPU current on this thread for the guard's lifetime and
// restores the previous one after (the registry's callers may be on any thread,
// and several backends share a thread).
class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int device);
  ~CudaDeviceGuard();
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace tessera

#define TESSERA_CUDA_CHECK(call) ::tessera::cuda_check((call), #call, __FILE__, __LINE__)
#define TESSERA_CUBLAS_CHECK(call) ::tessera::cublas_check((call), #call, __FILE__, __LINE__)
