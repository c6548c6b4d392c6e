// The reduction kernels (reduce.hpp). An output that reduces few elements
// gets one thread, which loops over them; one that reduces many gets a warp,
// or a whole block when the outputs are too few to fill the GPU, whose
// threads split its elements and combine their partials in a fixed tree. No
// atomics: the same input gives the same bits on every run and every device.
#include "backends/cuda/reduce_kernels.hpp"

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/launch.hpp"

namespace tessera {
namespace {

// Below this many reduced elements per output, a thread per output is best.
constexpr std::int64_t kThreadPerOutputBelow = 32;
// A block per output when each reduces at least this many and they are fewer
// than kBlockPerOutputMaxOutputs: a warp each would leave most SMs idle.
constexpr std::int64_t kBlockPerOutputFrom = 4096;
constexpr std::int64_t kBlockPerOutputMaxOutputs = 2048;
constexpr int kWarp = 32;

__global__ void reduce_thread_per_output(ReduceOp op, const float* x, float* out, ReduceIndex index,
                                         std::int64_t out_count) {
  for (std::int64_t o = first_index(); o < out_count; o += grid_stride())
    out[o] = reduce_element(op, x, index, o);
}

__device__ float warp_combine(ReduceOp op, float acc) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    acc = reduce_combine(op, acc, __shfl_down_sync(0xffffffffu, acc, offset));
  return acc;  // lane 0 holds the warp's total
}

// Warp w of the grid reduces outputs w, w + warps, ... (the loop bound is the
// same for the whole warp, so every lane reaches each shuffle).
__global__ void reduce_warp_per_output(ReduceOp op, const float* x, float* out, ReduceIndex index,
                                       std::int64_t out_count) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const std::int64_t warps = grid_stride() / kWarp;
  for (std::int64_t o = first_index() / kWarp; o < out_count; o += warps) {
    const float total = warp_combine(op, reduce_partial(op, x, index, o, lane, kWarp));
    if (lane == 0) out[o] = reduce_finish(op, total, index.count);
  }
}

// Block b reduces outputs b, b + blocks, ...: each warp combines its lanes,
// then warp 0 combines the warps' totals.
__global__ void reduce_block_per_output(ReduceOp op, const float* x, float* out, ReduceIndex index,
                                        std::int64_t out_count) {
  __shared__ float warp_totals[kLaunchThreads / kWarp];
  const int lane = static_cast<int>(threadIdx.x) % kWarp, warp = static_cast<int>(threadIdx.x) / kWarp;
  const int warps = static_cast<int>(blockDim.x) / kWarp;
  for (std::int64_t o = blockIdx.x; o < out_count; o += gridDim.x) {
    const float total = warp_combine(op, reduce_partial(op, x, index, o, threadIdx.x, blockDim.x));
    if (lane == 0) warp_totals[warp] = total;
    __syncthreads();
    if (warp == 0) {
      const float block_total = warp_combine(op, lane < warps ? warp_totals[lane] : reduce_identity(op));
      if (lane == 0) out[o] = reduce_finish(op, block_total, index.count);
    }
    __syncthreads();  // warp_totals is rewritten by the next output
  }
}

}  // namespace

void cuda_reduce(ReduceOp op, const float* x, float* out, const ReduceIndex& index,
                 std::int64_t out_count, cudaStream_t stream) {
  if (out_count <= 0) return;
  if (index.count < kThreadPerOutputBelow) {
    const LaunchConfig cfg = launch_config(out_count);
    reduce_thread_per_output<<<cfg.blocks, cfg.threads, 0, stream>>>(op, x, out, index, out_count);
  } else if (index.count >= kBlockPerOutputFrom && out_count < kBlockPerOutputMaxOutputs) {
    reduce_block_per_output<<<static_cast<int>(out_count), kLaunchThreads, 0, stream>>>(op, x, out, index, out_count);
  } else {
    const LaunchConfig cfg = launch_config(out_count * kWarp);
    reduce_warp_per_output<<<cfg.blocks, cfg.threads, 0, stream>>>(op, x, out, index, out_count);
  }
  cuda_check(cudaGetLastError(), "reduce kernel launch", __FILE__, __LINE__);
}

}  // namespace tessera
