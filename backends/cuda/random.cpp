// Random fills and dropout on the CUDA backend (random.cu), f32 only like the
// CPU backend's: other dtypes raise UnsupportedError, and supports() says so.
#include <string>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/require_f32.hpp"
#include "backends/cuda/random_kernels.hpp"

namespace tessera {
void CudaBackend::run_random_uniform(const Tensor& out, std::uint64_t seed, std::uint64_t offset,
                                     float low, float high) {
  require_f32(out, "random_uniform", device());
  CudaDeviceGuard guard(gpu_);
  cuda_random_uniform(out.data<float>(), make_uniform_fill(seed, offset, low, high), out.numel(),
                      stream_);
}

void CudaBackend::run_random_normal(const Tensor& out, std::uint64_t seed, std::uint64_t offset,
                                    float mean, float stddev) {
  require_f32(out, "random_normal", device());
  CudaDeviceGuard guard(gpu_);
  cuda_random_normal(out.data<float>(), NormalFill{seed, offset, mean, stddev}, out.numel(), stream_);
}

void CudaBackend::run_dropout(const Tensor& x, const Tensor& out, float rate, std::uint64_t seed,
                              std::uint64_t offset) {
  require_f32(x, "dropout", device());
  CudaDeviceGuard guard(gpu_);
  cuda_dropout(x.data<float>(), out.data<float>(), make_dropout(seed, offset, rate), x.numel(),
               stream_);
}

}  // namespace tessera
