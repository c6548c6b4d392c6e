// Optimizer kernels: grid-stride loops around the element functions of
// optimizer.hpp, one pass over parameter, gradient and state per step.
#include "backends/cuda/optimizer_kernels.hpp"

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/launch.hpp"

namespace tessera {
namespace {

__global__ void sgd_kernel(float* p, const float* g, float* v, SgdStep step, std::int64_t count) {
  for (std::int64_t i = first_index(); i < count; i += grid_stride()) step(p, g, v, i);
}

__global__ void adam_kernel(float* p, const float* g, float* m, float* v, AdamStep step,
                            std::int64_t count) {
  for (std::int64_t i = first_index(); i < count; i += grid_stride()) step(p, g, m, v, i);
}

__global__ void moving_average_kernel(float* state, const float* value, float momentum,
                                      std::int64_t count) {
  for (std::int64_t i = first_index(); i < count; i += grid_stride())
    state[i] = moving_average_element(state[i], value[i], momentum);
}

}  // namespace

void cuda_sgd_update(float* param, const float* grad, float* velocity, const SgdStep& step,
                     std::int64_t count, cudaStream_t stream) {
  const LaunchConfig cfg = launch_config(count);
  if (cfg.blocks == 0) return;
  sgd_kernel<<<cfg.blocks, cfg.threads, 0, stream>>>(param, grad, velocity, step, count);
  cuda_check(cudaGetLastError(), "sgd_kernel<<<blocks, 256, 0, stream>>>", __FILE__, __LINE__);
}

void cuda_adam_update(float* param, const float* grad, float* m, float* v, const AdamStep& step,
                      std::int64_t count, cudaStream_t stream) {
  const LaunchConfig cfg = launch_config(count);
  if (cfg.blocks == 0) return;
  adam_kernel<<<cfg.blocks, cfg.threads, 0, stream>>>(param, grad, m, v, step, count);
  cuda_check(cudaGetLastError(), "adam_kernel<<<blocks, 256, 0, stream>>>", __FILE__, __LINE__);
}

void cuda_moving_average(float* state, const float* value, float momentum, std::int64_t count,
                         cudaStream_t stream) {
  const LaunchConfig cfg = launch_config(count);
  if (cfg.blocks == 0) return;
  moving_average_kernel<<<cfg.blocks, cfg.threads, 0, stream>>>(state, value, momentum, count);
  cuda_check(cudaGetLastError(), "moving_average_kernel<<<blocks, 256, 0, stream>>>", __FILE__,
             __LINE__);
}

}  // namespace tessera
