// cast on the CUDA backend: CastElements (cast.hpp) run by cast.cu, bit for
// bit the CPU backend's conversions between f32, bf16, i32 and i64.
#include "backends/cuda/cast_kernels.hpp"
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"

namespace tessera {

void CudaBackend::run_cast(const Tensor& x, const Tensor& out) {
  if (x.dtype() == out.dtype()) return run_copy(x, out);
  CudaDeviceGuard guard(gpu_);
  cuda_cast(x.raw_data(), out.raw_data(), CastElements{x.dtype(), out.dtype()}, x.numel(), stream_);
}

}  // namespace tessera
