// Layer norm kernels (layer_norm.hpp): one thread per row for the forward and
// for dx, one thread per feature for dgamma and dbeta. Simple and
// deterministic; a warp per row would serve wide rows better when a profile
// asks for it.
#include "backends/cuda/layer_norm_kernels.hpp"

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/launch.hpp"

namespace tessera {
namespace {

__global__ void layer_norm_kernel(const float* x, const float* gamma, const float* beta, float* y,
                                  float* mean, float* rstd, std::int64_t rows,
                                  std::int64_t features, float epsilon) {
  for (std::int64_t r = first_index(); r < rows; r += grid_stride())
    layer_norm_row(x, gamma, beta, y, mean, rstd, features, epsilon, r);
}

__global__ void layer_norm_dx_kernel(const float* x, const float* gamma, const float* mean,
                                     const float* rstd, const float* dy, float* dx,
                                     std::int64_t rows, std::int64_t features) {
  for (std::int64_t r = first_index(); r < rows; r += grid_stride())
    layer_norm_backward_row(x, gamma, mean, rstd, dy, dx, features, r);
}

__global__ void layer_norm_param_grad_kernel(const float* x, const float* mean, const float* rstd,
                                             const float* dy, float* dgamma, float* dbeta,
                                             std::int64_t rows, std::int64_t features) {
  for (std::int64_t f = first_index(); f < features; f += grid_stride())
    layer_norm_param_grad(x, mean, rstd, dy, dgamma, dbeta, rows, features, f);
}

}  // namespace

void cuda_layer_norm(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                     float* rstd, std::int64_t rows, std::int64_t features, float epsilon,
                     cudaStream_t stream) {
  const LaunchConfig cfg = launch_config(features == 0 ? 0 : rows);
  if (cfg.blocks == 0) return;
  layer_norm_kernel<<<cfg.blocks, cfg.threads, 0, stream>>>(x, gamma, beta, y, mean, rstd, rows,
                                                            features, epsilon);
  cuda_check(cudaGetLastError(), "layer_norm_kernel<<<blocks, 256, 0, stream>>>", __FILE__,
             __LINE__);
}

void cuda_layer_norm_backward(const float* x, const float* gamma, const float* mean,
                              const float* rstd, const float* dy, float* dx, float* dgamma,
                              float* dbeta, std::int64_t rows, std::int64_t features,
                              cudaStream_t stream) {
  const LaunchConfig row_cfg = launch_config(features == 0 ? 0 : rows);
  if (row_cfg.blocks != 0) {
    layer_norm_dx_kernel<<<row_cfg.blocks, row_cfg.threads, 0, stream>>>(x, gamma, mean, rstd, dy,
                                                                         dx, rows, features);
    cuda_check(cudaGetLastError(), "layer_norm_dx_kernel<<<blocks, 256, 0, stream>>>", __FILE__,
               __LINE__);
  }
  const LaunchConfig feature_cfg = launch_config(features);
  if (feature_cfg.blocks == 0) return;
  layer_norm_param_grad_kernel<<<feature_cfg.blocks, feature_cfg.threads, 0, stream>>>(
      x, mean, rstd, dy, dgamma, dbeta, rows, features);
  cuda_check(cudaGetLastError(), "layer_norm_param_grad_kernel<<<blocks, 256, 0, stream>>>",
             __FILE__, __LINE__);
}

}  // namespace tessera
