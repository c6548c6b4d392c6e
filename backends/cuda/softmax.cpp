// Softmax and log-softmax, forward and backward, on the CUDA backend
// (softmax.cu), f32 only: bf16 raises UnsupportedError, and supports() says
// so beforehand.
#include <string>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/require_f32.hpp"
#include "backends/cuda/softmax_kernels.hpp"

namespace tessera {
namespace {

SoftmaxRows rows_of(const Tensor& t, int axis) {
  return make_softmax_rows(t.shape().dims().data(), t.rank(), axis);
}

}  // namespace

void CudaBackend::run_softmax(const Tensor& x, const Tensor& y, int axis, bool log, bool causal) {
  require_f32(x, log ? "log_softmax" : "softmax", device());
  CudaDeviceGuard guard(gpu_);
  // A causal softmax is over the last axis (Backend::softmax).
  const SoftmaxRows rows = causal ? make_causal_softmax_rows(x.shape().dims().data(), x.rank()) : rows_of(x, axis);
  cuda_softmax(x.data<float>(), y.data<float>(), rows, log, stream_);
}

void CudaBackend::run_softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx,
                                       int axis, bool log) {
  require_f32(y, log ? "log_softmax_backward" : "softmax_backward", device());
  CudaDeviceGuard guard(gpu_);
  cuda_softmax_backward(y.data<float>(), dy.data<float>(), dx.data<float>(), rows_of(y, axis), log,
                        stream_);
}

}  // namespace tessera
