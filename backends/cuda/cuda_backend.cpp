#include "backends/float_to_integer.hpp"
#include "backends/cuda/cuda_backend.hpp"

#include <cstdlib>
#include <cstring>
#include <string_view>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/cuda_kernels.hpp"
#include "backends/cuda/cuda_op_timer.hpp"
#include "backends/cuda/lt_matmul.hpp"
#include "backends/registry.hpp"

namespace tessera {
namespace {

template <typename T>
std::uint64_t bit_pattern(T value) {
  static_assert(sizeof(T) <= sizeof(std::uint64_t));
  std::uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof value);  // little-endian: the low bytes
  return bits;
}

}  // namespace

int cuda_runtime_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return count;
}

std::unique_ptr<Backend> make_cuda_backend(Device device, int gpu, int shares) {
  return std::make_unique<CudaBackend>(device, gpu, shares);
}

namespace {

int checked_gpu(Device device, int gpu) {
  const int count = cuda_runtime_device_count();
  if (gpu < 0 || gpu >= count)
    throw DeviceError("device " + device.str() + " would run on GPU " + std::to_string(gpu) + ", which does not exist: " +
                      std::to_string(count) + " GPU(s) found");
  return gpu;
}

// 1/shares of the GPU's memory for each of its logical devices; none (0) for a GPU of its own.
std::size_t memory_budget(int gpu, int shares) {
  if (shares <= 1) return 0;
  CudaDeviceGuard guard(gpu);
  std::size_t free = 0, total = 0;
  TESSERA_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return total / static_cast<std::size_t>(shares);
}

// Whether environment variable `variable` asks for a kernel no GPU has run
// yet (`unproven`) instead of the default (`proven`, also when unset):
// TESSERA_CUDA_FLASH_FORWARD, _BACKWARD (flash_attention.hpp: wmma or mma),
// TESSERA_CUDA_MATMUL_EPILOGUE (lt_matmul.hpp: pass or cublaslt).
bool unproven_asked(const char* variable, std::string_view proven, std::string_view unproven) {
  const char* value = std::getenv(variable);
  if (value == nullptr || value == proven) return false;
  if (value == unproven) return true;
  throw DeviceError(std::string(variable) + " is '" + value + "': " + std::string(proven) + " (the default) or " +
                    std::string(unproven));
}

}  // namespace

CudaBackend::CudaBackend(Device device, int gpu, int shares)
    : Backend(device),
      gpu_(checked_gpu(device, gpu)),
      allocator_(device, gpu_, memory_budget(gpu_, shares)),
      mma_forward_(unproven_asked("TESSERA_CUDA_FLASH_FORWARD", "wmma", "mma")),
      mma_backward_(unproven_asked("TESSERA_CUDA_FLASH_BACKWARD", "wmma", "mma")),
      lt_epilogue_(unproven_asked("TESSERA_CUDA_MATMUL_EPILOGUE", "pass", "cublaslt")) {
  CudaDeviceGuard guard(gpu_);
  try {
    cudaStream_t stream = nullptr;
    TESSERA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    stream_ = stream;
    cublasHandle_t handle = nullptr;
    TESSERA_CUBLAS_CHECK(cublasCreate(&handle));
    cublas_ = handle;
    TESSERA_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    cublasLtHandle_t lt = nullptr;
    TESSERA_CUBLAS_CHECK(cublasLtCreate(&lt));
    cublas_lt_ = lt;
    TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&shared_limit_, cudaDevAttrMaxSharedMemoryPerBlockOptin, gpu_));
  } catch (...) {
    release();
    throw;
  }
}

CudaBackend::~CudaBackend() { release(); }

void CudaBackend::release() noexcept {
  int previous = -1;
  bool switched = cudaGetDevice(&previous) == cudaSuccess && previous != gpu_ &&
                  cudaSetDevice(gpu_) == cudaSuccess;
  // Errors are dropped: this runs from the destructor, possibly at exit.
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  lt_plans_.reset();  // its descriptors, before the handle
  if (cublas_lt_ != nullptr) cublasLtDestroy(cublas_lt_);
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  cublas_lt_ = nullptr;
  cublas_ = nullptr;
  stream_ = nullptr;
  cudaGetLastError();
  if (switched) cudaSetDevice(previous);
}

bool CudaBackend::supports(OpKind kind, DType dtype) const {
  switch (kind) {
    case OpKind::fill:
      return true;
    case OpKind::matmul:
      return dtype == DType::f32 || dtype == DType::bf16;
    case OpKind::unary:
    case OpKind::unary_grad:
    case OpKind::binary:
    case OpKind::reduce:
    case OpKind::conv2d:
    case OpKind::conv2d_grad_input:
    case OpKind::conv2d_grad_weight:
    case OpKind::pool2d:
    case OpKind::pool2d_grad:
    case OpKind::softmax:
    case OpKind::softmax_grad:
    case OpKind::cached_attention:
    case OpKind::layer_norm:
    case OpKind::layer_norm_grad:
    case OpKind::dropout:
    case OpKind::sgd_update:
    case OpKind::adam_update:
    case OpKind::moving_average:
      return dtype == DType::f32;  // bf16 kernels not written yet
    case OpKind::broadcast_to:
    case OpKind::transpose:
    case OpKind::concat:
    case OpKind::slice:
    case OpKind::shard_slice:
    case OpKind::embedding:
    case OpKind::cache_write:
      return true;  // data movement: any element size
    case OpKind::cast:
      return true;  // between any two of f32, bf16, i32, i64
    case OpKind::one_hot:
      return dtype == DType::f32 || dtype == DType::bf16;
    case OpKind::attention:
    case OpKind::attention_grad:
      return dtype == DType::bf16;  // tensor cores: the graph builds matmul and softmax for f32 (prefers_attention_op)
    case OpKind::embedding_grad:
      return dtype == DType::f32;
    default:
      return false;  // leaves, views and collectives run no kernel
  }
}

void CudaBackend::synchronize() {
  CudaDeviceGuard guard(gpu_);
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

std::unique_ptr<OpTimer> CudaBackend::make_op_timer() { return std::make_unique<CudaOpTimer>(gpu_, stream_); }

void CudaBackend::run_copy(const Tensor& src, const Tensor& dst) {
  const std::size_t bytes = src.nbytes();
  if (bytes == 0) return;
  const Device from = src.device(), to = dst.device();
  const bool from_host = from.kind == DeviceKind::cpu, to_host = to.kind == DeviceKind::cpu;
  if (from_host && to_host)  // Backend::copy lets one side be on this device only
    throw DeviceError("copy: the cuda backend cannot copy host to host (" + src.describe() +
                      " to " + dst.describe() + ")");
  CudaDeviceGuard guard(gpu_);
  if (!from_host && !to_host && from != to) {
    // Between devices (GPUs, or logical devices of one): the other device's
    // stream is not ordered with this one, so wait for its pending work
    // first and for the copy after.
    Device other = from == device() ? to : from;
    backend_for(other).synchronize();
    TESSERA_CUDA_CHECK(cudaMemcpyPeerAsync(dst.raw_data(), cuda_gpu_of(to), src.raw_data(), cuda_gpu_of(from),
                                           bytes, stream_));
    TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return;
  }
  const cudaMemcpyKind kind = from_host ? cudaMemcpyHostToDevice
                              : to_host ? cudaMemcpyDeviceToHost
                                        : cudaMemcpyDeviceToDevice;
  // From pageable host memory, cudaMemcpyAsync returns once the source was
  // staged, so the caller may reuse it at once.
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), bytes, kind, stream_));
  // Host memory is read by the caller right after: wait for it to land.
  if (to_host) TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::run_fill(const Tensor& out, double value) {
  std::uint64_t bits = 0;
  switch (out.dtype()) {
    case DType::f32: bits = bit_pattern(static_cast<float>(value)); break;
    case DType::bf16: bits = bit_pattern(to_bf16(static_cast<float>(value)).bits); break;
    case DType::i32: bits = bit_pattern(float_to_i32(value)); break;  // as the CPU: saturating, NaN to 0
    case DType::i64: bits = bit_pattern(float_to_i64(value)); break;
  }
  if (out.numel() == 0) return;
  CudaDeviceGuard guard(gpu_);
  cuda_fill(out.raw_data(), out.numel(), static_cast<int>(dtype_size(out.dtype())), bits, stream_);
}

}  // namespace tessera
