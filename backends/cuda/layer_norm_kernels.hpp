// Host-side launchers of the layer norm kernels (layer_norm.cu), f32. Each
// enqueues on `stream` and checks the launches; none synchronizes.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "backends/cuda/layer_norm.hpp"

namespace tessera {

// Layer norm of every row of x viewed as [rows, features]: the passes of
// layer_norm.hpp split over a warp per row where layer_norm_warp_per_row, else
// layer_norm_row in a thread per row.
void cuda_layer_norm(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                     float* rstd, std::int64_t rows, std::int64_t features, float epsilon,
                     cudaStream_t stream);
// The same with y rounded to bf16 (bits) as cast rounds: a cast fused into the op.
void cuda_layer_norm(const float* x, const float* gamma, const float* beta, std::uint16_t* y, float* mean,
                     float* rstd, std::int64_t rows, std::int64_t features, float epsilon,
                     cudaStream_t stream);

// dx of every row, split the same way (layer_norm_backward_row where a thread
// takes the row), then dgamma and dbeta of every feature: in each chunk of
// rows (layer_norm_param_chunks), the sum of 16 row-lanes'
// layer_norm_param_grad_partial in row-lane order, then the chunks' sums in
// chunk order (dgamma and dbeta are overwritten; zero when there are no rows).
// `scratch`: `scratch_floats` of device memory for the chunks' partials.
void cuda_layer_norm_backward(const float* x, const float* gamma, const float* mean,
                              const float* rstd, const float* dy, float* dx, float* dgamma,
                              float* dbeta, std::int64_t rows, std::int64_t features,
                              float* scratch, std::int64_t scratch_floats, cudaStream_t stream);

}  // namespace tessera
