// Sum, mean and max reductions on the CUDA backend (reduce.cu), f32 only:
// bf16 raises UnsupportedError, and supports() says so beforehand.
#include <memory>
#include <string>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/require_f32.hpp"
#include "backends/cuda/reduce_kernels.hpp"

namespace tessera {

void CudaBackend::run_reduce(ReduceOp op, const Tensor& x, const Tensor& out) {
  require_f32(x, "reduce " + std::string(tessera::name(op)), device());
  if (out.numel() == 0) return;
  CudaDeviceGuard guard(gpu_);
  if (const auto view = make_reduce_view(x.shape().dims(), out.shape().dims())) {
    cuda_reduce_view(op, x.data<float>(), out.data<float>(), *view, partials_scratch(), stream_);
    return;
  }
  const ReduceIndex index = make_reduce_index(x.shape().dims(), out.shape().dims());
  cuda_reduce(op, x.data<float>(), out.data<float>(), index, out.numel(), stream_);
}

// Kernels on this backend's one stream run in order, so one scratch serves
// every reduction's and layer norm backward's partial sums.
float* CudaBackend::partials_scratch() {
  if (!partials_scratch_)
    partials_scratch_ = std::make_shared<Buffer>(allocator_, kReduceScratchFloats * sizeof(float));
  return static_cast<float*>(partials_scratch_->data());
}

}  // namespace tessera
