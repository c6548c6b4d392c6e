// Host-side launchers of the direct convolution and pooling kernels
// (conv_pool.cu), f32, one thread per output element. Each enqueues on
// `stream` and checks the launch; none synchronizes. A count of 0 launches
// nothing.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "backends/cuda/conv_pool.hpp"

namespace tessera {

// y = conv2d(x, w) + bias (bias may be null); y_count = N * OH * OW * F.
void cuda_conv2d_forward(const float* x, const float* w, const float* bias, float* y,
                         const ConvGeometry& g, std::int64_t y_count, cudaStream_t stream);
// dx from dy and w; dx_count = N * H * W * C.
void cuda_conv2d_backward_data(const float* dy, const float* w, float* dx, const ConvGeometry& g,
                               std::int64_t dx_count, cudaStream_t stream);
// dw from x and dy (dw_count = KH * KW * C * F), and db[F] when db is not null.
void cuda_conv2d_backward_weights(const float* x, const float* dy, float* dw, float* db,
                                  const ConvGeometry& g, std::int64_t dw_count,
                                  cudaStream_t stream);
// y = pool(x); y_count = N * OH * OW * C.
void cuda_pool2d_forward(PoolKind kind, const float* x, float* y, const ConvGeometry& g,
                         std::int64_t y_count, cudaStream_t stream);
// dx from x and dy; dx_count = N * H * W * C. relu_before: see Pool2dArgs.
void cuda_pool2d_backward(PoolKind kind, const float* x, const float* dy, float* dx,
                          const ConvGeometry& g, std::int64_t dx_count, bool relu_before,
                          cudaStream_t stream);

}  // namespace tessera
