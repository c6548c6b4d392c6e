// Elementwise unary ops, their backward, and broadcasting binary ops on the
// CUDA backend's own kernels (elementwise.cu). f32 only for now: bf16 tensors
// (and the integer dtypes binary ops accept) raise UnsupportedError, and
// supports() says so beforehand.
#include <string>

#include "backends/cuda/broadcast_index.hpp"
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/require_f32.hpp"
#include "backends/cuda/elementwise_kernels.hpp"

namespace tessera {
void CudaBackend::run_unary(UnaryOp op, const Tensor& x, const Tensor& y) {
  require_f32(x, "unary " + std::string(tessera::name(op)), device());
  CudaDeviceGuard guard(gpu_);
  if (y.dtype() == DType::bf16)  // rounded as it is written: a cast fused into the op (Backend::unary)
    return cuda_unary_to_bf16(op, x.data<float>(), static_cast<std::uint16_t*>(y.raw_data()), x.numel(), stream_);
  cuda_unary(op, x.data<float>(), y.data<float>(), x.numel(), stream_);
}

void CudaBackend::run_unary_backward(UnaryOp op, const Tensor& x, const Tensor& dy,
                                     const Tensor& dx) {
  require_f32(x, "unary " + std::string(tessera::name(op)) + " backward", device());
  CudaDeviceGuard guard(gpu_);
  cuda_unary_backward(op, x.data<float>(), dy.data<float>(), dx.data<float>(), x.numel(), stream_);
}

void CudaBackend::run_binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  require_f32(a, "binary " + std::string(tessera::name(op)), device());
  if (out.numel() == 0) return;
  const BroadcastIndex index = make_broadcast_index(a.shape().dims(), b.shape().dims(),
                                                    out.shape().dims());
  CudaDeviceGuard guard(gpu_);
  cuda_binary(op, a.data<float>(), b.data<float>(), out.data<float>(), index, out.numel(), stream_);
}

}  // namespace tessera
