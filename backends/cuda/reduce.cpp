// Sum, mean and max reductions on the CUDA backend (reduce.cu), f32 only:
// bf16 raises UnsupportedError, and supports() says so beforehand.
#include <string>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/require_f32.hpp"
#include "backends/cuda/reduce_kernels.hpp"

namespace tessera {

void CudaBackend::run_reduce(ReduceOp op, const Tensor& x, const Tensor& out) {
  require_f32(x, "reduce " + std::string(tessera::name(op)), device());
  if (out.numel() == 0) return;
  const ReduceIndex index = make_reduce_index(x.shape().dims(), out.shape().dims());
  CudaDeviceGuard guard(gpu_);
  cuda_reduce(op, x.data<float>(), out.data<float>(), index, out.numel(), stream_);
}

}  // namespace tessera
