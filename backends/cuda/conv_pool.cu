// The direct convolution and pooling kernels: one thread per output element,
// each looping over its contributing terms (conv_pool.hpp). Simple, exact in
// its order and free of atomics; cuDNN or implicit-GEMM kernels would be the
// fast path when a profile asks for one.
#include "backends/cuda/conv_pool_kernels.hpp"

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/launch.hpp"

namespace tessera {
namespace {

__global__ void conv2d_forward_kernel(const float* x, const float* w, const float* bias, float* y,
                                      ConvGeometry g, std::int64_t count) {
  for (std::int64_t o = first_index(); o < count; o += grid_stride())
    y[o] = conv2d_forward_element(x, w, bias, g, o);
}

__global__ void conv2d_backward_data_kernel(const float* dy, const float* w, float* dx,
                                            ConvGeometry g, std::int64_t count) {
  for (std::int64_t o = first_index(); o < count; o += grid_stride())
    dx[o] = conv2d_backward_data_element(dy, w, g, o);
}

__global__ void conv2d_backward_weights_kernel(const float* x, const float* dy, float* dw,
                                               ConvGeometry g, std::int64_t count) {
  for (std::int64_t o = first_index(); o < count; o += grid_stride())
    dw[o] = conv2d_backward_weights_element(x, dy, g, o);
}

__global__ void conv2d_backward_bias_kernel(const float* dy, float* db, ConvGeometry g) {
  for (std::int64_t o = first_index(); o < g.f; o += grid_stride())
    db[o] = conv2d_backward_bias_element(dy, g, o);
}

__global__ void pool2d_forward_kernel(PoolKind kind, const float* x, float* y, ConvGeometry g,
                                      std::int64_t count) {
  for (std::int64_t o = first_index(); o < count; o += grid_stride())
    y[o] = pool2d_forward_element(kind, x, g, o);
}

__global__ void pool2d_backward_kernel(PoolKind kind, const float* x, const float* dy, float* dx,
                                       ConvGeometry g, std::int64_t count, bool relu_before) {
  for (std::int64_t o = first_index(); o < count; o += grid_stride())
    dx[o] = pool2d_backward_element(kind, x, dy, g, o, relu_before);
}

}  // namespace

void cuda_conv2d_forward(const float* x, const float* w, const float* bias, float* y,
                         const ConvGeometry& g, std::int64_t y_count, cudaStream_t stream) {
  const LaunchConfig cfg = launch_config(y_count);
  if (cfg.blocks == 0) return;
  conv2d_forward_kernel<<<cfg.blocks, cfg.threads, 0, stream>>>(x, w, bias, y, g, y_count);
  cuda_check(cudaGetLastError(), "conv2d_forward_kernel<<<blocks, 256, 0, stream>>>", __FILE__,
             __LINE__);
}

void cuda_conv2d_backward_data(const float* dy, const float* w, float* dx, const ConvGeometry& g,
                               std::int64_t dx_count, cudaStream_t stream) {
  const LaunchConfig cfg = launch_config(dx_count);
  if (cfg.blocks == 0) return;
  conv2d_backward_data_kernel<<<cfg.blocks, cfg.threads, 0, stream>>>(dy, w, dx, g, dx_count);
  cuda_check(cudaGetLastError(), "conv2d_backward_data_kernel<<<blocks, 256, 0, stream>>>",
             __FILE__, __LINE__);
}

void cuda_conv2d_backward_weights(const float* x, const float* dy, float* dw, float* db,
                                  const ConvGeometry& g, std::int64_t dw_count,
                                  cudaStream_t stream) {
  const LaunchConfig cfg = launch_config(dw_count);
  if (cfg.blocks > 0) {
    conv2d_backward_weights_kernel<<<cfg.blocks, cfg.threads, 0, stream>>>(x, dy, dw, g, dw_count);
    cuda_check(cudaGetLastError(), "conv2d_backward_weights_kernel<<<blocks, 256, 0, stream>>>",
               __FILE__, __LINE__);
  }
  const LaunchConfig bias_cfg = launch_config(g.f);
  if (db == nullptr || bias_cfg.blocks == 0) return;
  conv2d_backward_bias_kernel<<<bias_cfg.blocks, bias_cfg.threads, 0, stream>>>(dy, db, g);
  cuda_check(cudaGetLastError(), "conv2d_backward_bias_kernel<<<blocks, 256, 0, stream>>>",
             __FILE__, __LINE__);
}

void cuda_pool2d_forward(PoolKind kind, const float* x, float* y, const ConvGeometry& g,
                         std::int64_t y_count, cudaStream_t stream) {
  const LaunchConfig cfg = launch_config(y_count);
  if (cfg.blocks == 0) return;
  pool2d_forward_kernel<<<cfg.blocks, cfg.threads, 0, stream>>>(kind, x, y, g, y_count);
  cuda_check(cudaGetLastError(), "pool2d_forward_kernel<<<blocks, 256, 0, stream>>>", __FILE__,
             __LINE__);
}

void cuda_pool2d_backward(PoolKind kind, const float* x, const float* dy, float* dx,
                          const ConvGeometry& g, std::int64_t dx_count, bool relu_before,
                          cudaStream_t stream) {
  const LaunchConfig cfg = launch_config(dx_count);
  if (cfg.blocks == 0) return;
  pool2d_backward_kernel<<<cfg.blocks, cfg.threads, 0, stream>>>(kind, x, dy, dx, g, dx_count, relu_before);
  cuda_check(cudaGetLastError(), "pool2d_backward_kernel<<<blocks, 256, 0, stream>>>", __FILE__,
             __LINE__);
}

}  // namespace tessera
