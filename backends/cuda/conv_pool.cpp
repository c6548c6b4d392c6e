// 2-D convolution and pooling on the CUDA backend (conv_pool.cu), f32 only:
// bf16 raises UnsupportedError, and supports() says so beforehand.
#include "backends/cuda/conv_pool_kernels.hpp"
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/require_f32.hpp"

namespace tessera {

void CudaBackend::run_conv2d_forward(const Tensor& x, const Tensor& w, const Tensor* bias,
                                     const Tensor& y, const Conv2dArgs& args) {
  require_f32(x, "conv2d_forward", device());
  if (y.numel() == 0) return;
  const ConvGeometry g = conv_geometry(x.shape(), w.shape(), y.shape(), args);
  CudaDeviceGuard guard(gpu_);
  cuda_conv2d_forward(x.data<float>(), w.data<float>(), bias ? bias->data<float>() : nullptr,
                      y.data<float>(), g, y.numel(), stream_);
  // The activation in place: an elementwise pass over y (cuDNN-free kernels).
  if (args.activation != Activation::none) run_unary(activation_unary(args.activation), y, y);
}

void CudaBackend::run_conv2d_backward_data(const Tensor& dy, const Tensor& w, const Tensor& dx,
                                           const Conv2dArgs& args) {
  require_f32(dy, "conv2d_backward_data", device());
  if (dx.numel() == 0) return;
  const ConvGeometry g = conv_geometry(dx.shape(), w.shape(), dy.shape(), args);
  CudaDeviceGuard guard(gpu_);
  cuda_conv2d_backward_data(dy.data<float>(), w.data<float>(), dx.data<float>(), g, dx.numel(),
                            stream_);
}

void CudaBackend::run_conv2d_backward_weights(const Tensor& x, const Tensor& dy, const Tensor& dw,
                                              const Tensor* db, const Conv2dArgs& args) {
  require_f32(x, "conv2d_backward_weights", device());
  const ConvGeometry g = conv_geometry(x.shape(), dw.shape(), dy.shape(), args);
  CudaDeviceGuard guard(gpu_);
  cuda_conv2d_backward_weights(x.data<float>(), dy.data<float>(), dw.data<float>(),
                               db ? db->data<float>() : nullptr, g, dw.numel(), stream_);
}

void CudaBackend::run_pool2d_forward(const Tensor& x, const Tensor& y, const Pool2dArgs& args) {
  require_f32(x, "pool2d_forward", device());
  if (y.numel() == 0) return;
  const ConvGeometry g = pool_geometry(x.shape(), y.shape(), args);
  CudaDeviceGuard guard(gpu_);
  cuda_pool2d_forward(args.kind, x.data<float>(), y.data<float>(), g, y.numel(), stream_);
}

void CudaBackend::run_pool2d_backward(const Tensor& x, const Tensor& dy, const Tensor& dx,
                                      const Pool2dArgs& args) {
  require_f32(x, "pool2d_backward", device());
  if (dx.numel() == 0) return;
  const ConvGeometry g = pool_geometry(x.shape(), dy.shape(), args);
  CudaDeviceGuard guard(gpu_);
  cuda_pool2d_backward(args.kind, x.data<float>(), dy.data<float>(), dx.data<float>(), g,
                       dx.numel(), args.relu_before, stream_);
}

}  // namespace tessera
