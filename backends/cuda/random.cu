// Random fill and dropout kernels: grid-stride loops around the element
// functions of random.hpp. Each element computes its own Philox block (four
// positions share one, so neighbours redo some work): the kernels stay a pure
// function of the element index, the property that makes GPU and CPU agree.
#include "backends/cuda/random_kernels.hpp"

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/launch.hpp"

namespace tessera {
namespace {

template <typename Fill>
__global__ void fill_kernel(float* out, Fill fill, std::int64_t count) {
  for (std::int64_t i = first_index(); i < count; i += grid_stride()) out[i] = fill(i);
}

__global__ void dropout_kernel(const float* x, float* out, Dropout dropout, std::int64_t count) {
  for (std::int64_t i = first_index(); i < count; i += grid_stride()) out[i] = dropout(x[i], i);
}

}  // namespace

void cuda_random_uniform(float* out, const UniformFill& fill, std::int64_t count, cudaStream_t stream) {
  const LaunchConfig cfg = launch_config(count);
  if (cfg.blocks == 0) return;
  fill_kernel<<<cfg.blocks, cfg.threads, 0, stream>>>(out, fill, count);
  cuda_check(cudaGetLastError(), "fill_kernel<UniformFill><<<blocks, 256, 0, stream>>>", __FILE__,
             __LINE__);
}

void cuda_random_normal(float* out, const NormalFill& fill, std::int64_t count, cudaStream_t stream) {
  const LaunchConfig cfg = launch_config(count);
  if (cfg.blocks == 0) return;
  fill_kernel<<<cfg.blocks, cfg.threads, 0, stream>>>(out, fill, count);
  cuda_check(cudaGetLastError(), "fill_kernel<NormalFill><<<blocks, 256, 0, stream>>>", __FILE__,
             __LINE__);
}

void cuda_dropout(const float* x, float* out, const Dropout& dropout, std::int64_t count,
                  cudaStream_t stream) {
  const LaunchConfig cfg = launch_config(count);
  if (cfg.blocks == 0) return;
  dropout_kernel<<<cfg.blocks, cfg.threads, 0, stream>>>(x, out, dropout, count);
  cuda_check(cudaGetLastError(), "dropout_kernel<<<blocks, 256, 0, stream>>>", __FILE__, __LINE__);
}

}  // namespace tessera
