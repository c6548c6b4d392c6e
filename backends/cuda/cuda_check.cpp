#include "backends/cuda/cuda_check.hpp"

#include <algorithm>
#include <string>
#include <string_view>

#include "engine/core/error.hpp"

namespace tessera {
namespace {

// "/work/main/backends/cuda/x.cpp" → "backends/cuda/x.cpp": the path as the
// repository names it (from its first "backends/" or "tests/" directory),
// whatever directory the build ran in.
std::string_view source_path(const char* file) {
  std::string_view path(file);
  auto pos = std::min(path.find("/backends/"), path.find("/tests/"));
  return pos == std::string_view::npos ? path : path.substr(pos + 1);
}

std::string where(const char* library, const char* call, const char* file, int line) {
  return std::string(library) + " error at " + std::string(source_path(file)) + ":" +
         std::to_string(line) + ": " + call + " failed: ";
}

}  // namespace

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  cudaGetLastError();  // clear a non-sticky error so later calls do not report it again
  throw Error(where("CUDA", call, file, line) + cudaGetErrorName(status) + " (" +
              cudaGetErrorString(status) + ")");
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  throw Error(where("cuBLAS", call, file, line) + cublasGetStatusName(status) + " (" +
              cublasGetStatusString(status) + ")");
}

CudaDeviceGuard::CudaDeviceGuard(int device) {
  TESSERA_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) TESSERA_CUDA_CHECK(cudaSetDevice(device));
  else previous_ = -1;  // nothing to restore
}

CudaDeviceGuard::~CudaDeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);  // a destructor must not throw
}

}  // namespace tessera
