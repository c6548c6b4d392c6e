// Softmax kernels (softmax.hpp). Over the last axis, rows of at least
// kSoftmaxWarpFrom elements get a warp each: lane l reads j = l, l + 32, ...,
// so each load of the warp is one coalesced run, and the lanes' max and sums
// meet in a shuffle tree. Otherwise a thread takes each row: with inner > 1
// adjacent rows are adjacent in memory, so the threads' loads coalesce. No
// atomics: every run gives the same bits.
#include "backends/cuda/softmax_kernels.hpp"

#include <cstdint>

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/launch.hpp"
#include "backends/cuda/warp_tree.hpp"

namespace tessera {
namespace {

constexpr int kWarp = kWarpLanes;
static_assert(kLaunchThreads % kWarp == 0, "whole warps per block");

// Every lane gets lane 0's max under softmax's own combine (warp_tree.hpp).
__device__ float warp_softmax_max(float v) {
  return warp_tree_to_all(v, [](float a, float b) { return softmax_max_combine(a, b); });
}

__global__ void softmax_kernel(const float* x, float* y, SoftmaxRows rows, bool log) {
  for (std::int64_t r = first_index(); r < rows.count(); r += grid_stride())
    softmax_row(x, y, rows, r, log);
}

// Warp w of the grid takes rows w, w + warps, ...: the bound is the same for
// the whole warp, so every lane reaches each shuffle.
__global__ void softmax_warp_kernel(const float* x, float* y, SoftmaxRows rows, bool log) {
  const std::int64_t lane = threadIdx.x % kWarp, warps = grid_stride() / kWarp;
  for (std::int64_t r = first_index() / kWarp; r < rows.count(); r += warps) {
    const float max = warp_softmax_max(softmax_partial_max(x, rows, r, lane, kWarp));
    const float sum = warp_sum(softmax_partial_sum(x, rows, r, max, lane, kWarp));
    softmax_write(x, y, rows, r, max, sum, log, lane, kWarp);
  }
}

__global__ void softmax_backward_kernel(const float* y, const float* dy, float* dx,
                                        SoftmaxRows rows, bool log) {
  for (std::int64_t r = first_index(); r < rows.count(); r += grid_stride())
    softmax_backward_row(y, dy, dx, rows, r, log);
}

__global__ void softmax_backward_warp_kernel(const float* y, const float* dy, float* dx,
                                             SoftmaxRows rows, bool log) {
  const std::int64_t lane = threadIdx.x % kWarp, warps = grid_stride() / kWarp;
  for (std::int64_t r = first_index() / kWarp; r < rows.count(); r += warps) {
    const float sum = warp_sum(softmax_backward_partial(y, dy, rows, r, log, lane, kWarp));
    softmax_backward_write(y, dy, dx, rows, r, sum, log, lane, kWarp);
  }
}

// A warp's worth of threads per row on the warp path, else one.
LaunchConfig softmax_launch(const SoftmaxRows& rows) {
  if (rows.n == 0) return {0, kLaunchThreads};
  return launch_config(softmax_warp_per_row(rows) ? rows.count() * kWarp : rows.count());
}

}  // namespace

void cuda_softmax(const float* x, float* y, const SoftmaxRows& rows, bool log, cudaStream_t stream) {
  const LaunchConfig cfg = softmax_launch(rows);
  if (cfg.blocks == 0) return;
  if (softmax_warp_per_row(rows)) {
    softmax_warp_kernel<<<cfg.blocks, cfg.threads, 0, stream>>>(x, y, rows, log);
    cuda_check(cudaGetLastError(), "softmax_warp_kernel<<<blocks, 256, 0, stream>>>", __FILE__,
               __LINE__);
  } else {
    softmax_kernel<<<cfg.blocks, cfg.threads, 0, stream>>>(x, y, rows, log);
    cuda_check(cudaGetLastError(), "softmax_kernel<<<blocks, 256, 0, stream>>>", __FILE__, __LINE__);
  }
}

void cuda_softmax_backward(const float* y, const float* dy, float* dx, const SoftmaxRows& rows,
                           bool log, cudaStream_t stream) {
  const LaunchConfig cfg = softmax_launch(rows);
  if (cfg.blocks == 0) return;
  if (softmax_warp_per_row(rows)) {
    softmax_backward_warp_kernel<<<cfg.blocks, cfg.threads, 0, stream>>>(y, dy, dx, rows, log);
    cuda_check(cudaGetLastError(), "softmax_backward_warp_kernel<<<blocks, 256, 0, stream>>>",
               __FILE__, __LINE__);
  } else {
    softmax_backward_kernel<<<cfg.blocks, cfg.threads, 0, stream>>>(y, dy, dx, rows, log);
    cuda_check(cudaGetLastError(), "softmax_backward_kernel<<<blocks, 256, 0, stream>>>", __FILE__,
               __LINE__);
  }
}

}  // namespace tessera
