// Layer normalisation over the last axis on the CUDA backend (layer_norm.cu).
// Backend::layer_norm has checked that every operand is f32 (y may be bf16).
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/layer_norm_kernels.hpp"
#include "backends/cuda/reduce.hpp"

namespace tessera {

void CudaBackend::run_layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                 const Tensor& y, const Tensor& mean, const Tensor& rstd,
                                 float epsilon) {
  const std::int64_t features = x.shape()[x.rank() - 1];
  const std::int64_t rows = features == 0 ? 0 : x.numel() / features;
  CudaDeviceGuard guard(gpu_);
  if (y.dtype() == DType::bf16)  // rounded as it is written: a cast fused into the op (Backend::layer_norm)
    return cuda_layer_norm(x.data<float>(), gamma.data<float>(), beta.data<float>(),
                           static_cast<std::uint16_t*>(y.raw_data()), mean.data<float>(), rstd.data<float>(), rows,
                           features, epsilon, stream_);
  cuda_layer_norm(x.data<float>(), gamma.data<float>(), beta.data<float>(), y.data<float>(),
                  mean.data<float>(), rstd.data<float>(), rows, features, epsilon, stream_);
}

void CudaBackend::run_layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                          const Tensor& rstd, const Tensor& dy, const Tensor& dx,
                                          const Tensor& dgamma, const Tensor& dbeta) {
  const std::int64_t features = x.shape()[x.rank() - 1];
  const std::int64_t rows = features == 0 ? 0 : x.numel() / features;
  CudaDeviceGuard guard(gpu_);
  cuda_layer_norm_backward(x.data<float>(), gamma.data<float>(), mean.data<float>(),
                           rstd.data<float>(), dy.data<float>(), dx.data<float>(),
                           dgamma.data<float>(), dbeta.data<float>(), rows, features, partials_scratch(),
                           kReduceScratchFloats, stream_);
}

}  // namespace tessera
