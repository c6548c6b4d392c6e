// Softmax kernels: one thread per row (softmax.hpp), three passes over it.
// Simple and exact; a warp per row would serve long rows better when a
// profile asks for it.
#include "backends/cuda/softmax_kernels.hpp"

#include <cstdint>

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/launch.hpp"

namespace tessera {
namespace {

__global__ void softmax_kernel(const float* x, float* y, SoftmaxRows rows, bool log) {
  for (std::int64_t r = first_index(); r < rows.count(); r += grid_stride())
    softmax_row(x, y, rows, r, log);
}

__global__ void softmax_backward_kernel(const float* y, const float* dy, float* dx,
                                        SoftmaxRows rows, bool log) {
  for (std::int64_t r = first_index(); r < rows.count(); r += grid_stride())
    softmax_backward_row(y, dy, dx, rows, r, log);
}

}  // namespace

void cuda_softmax(const float* x, float* y, const SoftmaxRows& rows, bool log, cudaStream_t stream) {
  const LaunchConfig cfg = launch_config(rows.n == 0 ? 0 : rows.count());
  if (cfg.blocks == 0) return;
  softmax_kernel<<<cfg.blocks, cfg.threads, 0, stream>>>(x, y, rows, log);
  cuda_check(cudaGetLastError(), "softmax_kernel<<<blocks, 256, 0, stream>>>", __FILE__, __LINE__);
}

void cuda_softmax_backward(const float* y, const float* dy, float* dx, const SoftmaxRows& rows,
                           bool log, cudaStream_t stream) {
  const LaunchConfig cfg = launch_config(rows.n == 0 ? 0 : rows.count());
  if (cfg.blocks == 0) return;
  softmax_backward_kernel<<<cfg.blocks, cfg.threads, 0, stream>>>(y, dy, dx, rows, log);
  cuda_check(cudaGetLastError(), "softmax_backward_kernel<<<blocks, 256, 0, stream>>>", __FILE__,
             __LINE__);
}

}  // namespace tessera
