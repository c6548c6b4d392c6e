// Fused optimizer updates and the moving average on the CUDA backend
// (optimizer.cu). Backend::sgd_update and friends have checked that every
// operand is f32 with the parameter's shape.
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/optimizer_kernels.hpp"
#include "backends/cuda/optimizer_steps.hpp"

namespace tessera {

void CudaBackend::run_sgd_update(const Tensor& param, const Tensor& grad, const Tensor& velocity,
                                 const SgdArgs& args) {
  CudaDeviceGuard guard(gpu_);
  cuda_sgd_update(param.data<float>(), grad.data<float>(), velocity.data<float>(),
                  make_sgd_step(args), param.numel(), stream_);
}

void CudaBackend::run_adam_update(const Tensor& param, const Tensor& grad, const Tensor& m,
                                  const Tensor& v, const AdamArgs& args) {
  CudaDeviceGuard guard(gpu_);
  cuda_adam_update(param.data<float>(), grad.data<float>(), m.data<float>(), v.data<float>(),
                   make_adam_step(args), param.numel(), stream_);
}

void CudaBackend::run_moving_average(const Tensor& state, const Tensor& value, float momentum) {
  CudaDeviceGuard guard(gpu_);
  cuda_moving_average(state.data<float>(), value.data<float>(), momentum, state.numel(), stream_);
}

}  // namespace tessera
