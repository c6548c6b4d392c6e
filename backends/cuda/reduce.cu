// The reduction kernel: one thread per output element, each looping over its
// reduced elements (reduce.hpp). Simple and exact against the CPU backend;
// a reduction over few outputs leaves most of the GPU idle, which a
// block-per-output variant would fix when a profile asks for it.
#include "backends/cuda/reduce_kernels.hpp"

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/launch.hpp"

namespace tessera {
namespace {

__global__ void reduce_kernel(ReduceOp op, const float* x, float* out, ReduceIndex index,
                              std::int64_t out_count) {
  for (std::int64_t o = first_index(); o < out_count; o += grid_stride())
    out[o] = reduce_element(op, x, index, o);
}

}  // namespace

void cuda_reduce(ReduceOp op, const float* x, float* out, const ReduceIndex& index,
                 std::int64_t out_count, cudaStream_t stream) {
  const LaunchConfig cfg = launch_config(out_count);
  if (cfg.blocks == 0) return;
  reduce_kernel<<<cfg.blocks, cfg.threads, 0, stream>>>(op, x, out, index, out_count);
  cuda_check(cudaGetLastError(), "reduce_kernel<<<blocks, 256, 0, stream>>>", __FILE__, __LINE__);
}

}  // namespace tessera
