// The reduction kernels (reduce.hpp), no atomics: the same input gives the
// same bits on every run and every device.
//
// With a view [outer, count, inner]:
// - inner 1 (each output's elements contiguous): few elements, a thread per
//   output; many, a warp per output; many per output and few outputs (a norm,
//   a loss), chunks of each output's elements over many blocks of 1024
//   threads, whose partials a second kernel totals in a fixed order;
// - inner > 1 (a bias gradient: a sum over rows per column): blocks of 32
//   consecutive columns, so that a warp loads 128 contiguous bytes, by 32 row
//   lanes whose partials meet in shared memory, over all rows or, where those
//   blocks would be too few to fill the GPU, over chunks of rows whose
//   partials a second kernel totals; or a thread per output, which is
//   coalesced too, when the outputs fill the GPU or few rows are summed.
// Without a view, the ReduceIndex kernels: a thread, a warp or a block per
// output, with index divisions per element.
#include "backends/cuda/reduce_kernels.hpp"

#include <algorithm>

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/launch.hpp"
#include "backends/cuda/warp_tree.hpp"

namespace tessera {
namespace {

constexpr int kWarp = kWarpLanes;

__device__ float warp_combine(ReduceOp op, float acc) {  // lane 0 gets the warp's total
  return warp_tree(acc, [op](float a, float b) { return reduce_combine(op, a, b); });
}

// Thread 0 gets the block's total: each warp combines its lanes, then warp 0
// the warps' totals. Every thread of the block must call it.
__device__ float block_combine(ReduceOp op, float acc) {
  __shared__ float warp_totals[kReduceChunkThreads / kWarp];
  const int lane = static_cast<int>(threadIdx.x) % kWarp, warp = static_cast<int>(threadIdx.x) / kWarp;
  const int warps = static_cast<int>(blockDim.x) / kWarp;
  acc = warp_combine(op, acc);
  if (lane == 0) warp_totals[warp] = acc;
  __syncthreads();
  float total = reduce_identity(op);
  if (warp == 0) total = warp_combine(op, lane < warps ? warp_totals[lane] : reduce_identity(op));
  __syncthreads();  // warp_totals may be rewritten by the caller's next round
  return total;
}

// --- ReduceIndex kernels (any set of axes) ---------------------------------------

__global__ void reduce_thread_per_output(ReduceOp op, const float* x, float* out, ReduceIndex index,
                                         std::int64_t out_count) {
  for (std::int64_t o = first_index(); o < out_count; o += grid_stride())
    out[o] = reduce_element(op, x, index, o);
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

__global__ void reduce_block_per_output(ReduceOp op, const float* x, float* out, ReduceIndex index,
                                        std::int64_t out_count) {
  for (std::int64_t o = blockIdx.x; o < out_count; o += gridDim.x) {
    const float total = block_combine(op, reduce_partial(op, x, index, o, threadIdx.x, blockDim.x));
    if (threadIdx.x == 0) out[o] = reduce_finish(op, total, index.count);
  }
}

// --- ReduceView kernels ------------------------------------------------------------

__global__ void view_thread_per_output(ReduceOp op, const float* x, float* out, ReduceView view) {
  const std::int64_t out_count = view.outer * view.inner;
  for (std::int64_t o = first_index(); o < out_count; o += grid_stride())
    out[o] = reduce_finish(op, reduce_view_partial(op, x, view, o, 0, view.count, 0, 1), view.count);
}

__global__ void view_warp_per_output(ReduceOp op, const float* x, float* out, ReduceView view) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const std::int64_t warps = grid_stride() / kWarp, out_count = view.outer * view.inner;
  for (std::int64_t o = first_index() / kWarp; o < out_count; o += warps) {
    const float total = warp_combine(op, reduce_view_partial(op, x, view, o, 0, view.count, lane, kWarp));
    if (lane == 0) out[o] = reduce_finish(op, total, view.count);
  }
}

// Block (s, o) reduces chunk s of output o into partials[o * chunks + s].
__global__ void __launch_bounds__(kReduceChunkThreads)
    view_chunks(ReduceOp op, const float* x, float* partials, ReduceView view, std::int64_t chunk) {
  const std::int64_t s = blockIdx.x, o = blockIdx.y;
  const std::int64_t begin = s * chunk, end = begin + chunk < view.count ? begin + chunk : view.count;
  const float total = block_combine(op, reduce_view_partial(op, x, view, o, begin, end, threadIdx.x, blockDim.x));
  if (threadIdx.x == 0) partials[o * gridDim.x + s] = total;
}

// A warp per output totals its chunks' partials.
__global__ void view_chunk_totals(ReduceOp op, const float* partials, float* out, std::int64_t chunks,
                                  std::int64_t count, std::int64_t out_count) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const std::int64_t warps = grid_stride() / kWarp;
  for (std::int64_t o = first_index() / kWarp; o < out_count; o += warps) {
    float acc = reduce_identity(op);
    for (std::int64_t s = lane; s < chunks; s += kWarp) acc = reduce_combine(op, acc, partials[o * chunks + s]);
    const float total = warp_combine(op, acc);
    if (lane == 0) out[o] = reduce_finish(op, total, count);
  }
}

// Rows [begin, end) of the 32 columns of tile t (columns [c0, c0 + 32) of
// outer index a): thread (col, row lane) sums rows begin + row lane, + 32,
// ...; row lane 0 then adds the 32 partials of its column in order and
// returns them, with the column's output index in `o` (false for the other
// row lanes and for columns past the view's). Every thread of the block must
// call it, and `partials` is reused when it returns.
__device__ bool column_tile_total(ReduceOp op, const float* x, const ReduceView& view, std::int64_t t,
                                  std::int64_t begin, std::int64_t end,
                                  float (&partials)[kReduceColumnRowLanes][kWarp + 1], std::int64_t& o,
                                  float& total) {
  const int col = static_cast<int>(threadIdx.x), row_lane = static_cast<int>(threadIdx.y);
  const std::int64_t tiles_per_outer = reduce_ceil_div(view.inner, kWarp);
  const std::int64_t a = t / tiles_per_outer, c = (t - a * tiles_per_outer) * kWarp + col;
  const bool inside = c < view.inner;
  o = a * view.inner + c;
  partials[row_lane][col] = inside ? reduce_view_partial(op, x, view, o, begin, end, row_lane, kReduceColumnRowLanes)
                                   : reduce_identity(op);
  __syncthreads();
  const bool mine = row_lane == 0 && inside;
  if (mine) {
    total = partials[0][col];
    for (int l = 1; l < kReduceColumnRowLanes; ++l) total = reduce_combine(op, total, partials[l][col]);
  }
  __syncthreads();
  return mine;
}

// Tile t's 32 columns, all their rows, for t = block, block + blocks, ...
__global__ void __launch_bounds__(kWarp * kReduceColumnRowLanes)
    view_column_tiles(ReduceOp op, const float* x, float* out, ReduceView view) {
  __shared__ float partials[kReduceColumnRowLanes][kWarp + 1];  // +1: no bank conflicts
  const std::int64_t tiles = view.outer * reduce_ceil_div(view.inner, kWarp);
  for (std::int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    std::int64_t o = 0;
    float total = 0.0f;
    if (column_tile_total(op, x, view, t, 0, view.count, partials, o, total))
      out[o] = reduce_finish(op, total, view.count);
  }
}

// Block (t, s): tile t's 32 columns, the rows of chunk s, into
// chunk_partials[o * chunks + s] (view_chunk_totals adds them).
__global__ void __launch_bounds__(kWarp * kReduceColumnRowLanes)
    view_column_chunks(ReduceOp op, const float* x, float* chunk_partials, ReduceView view, std::int64_t chunk) {
  __shared__ float partials[kReduceColumnRowLanes][kWarp + 1];
  const std::int64_t s = blockIdx.y, begin = s * chunk;
  const std::int64_t end = begin + chunk < view.count ? begin + chunk : view.count;
  std::int64_t o = 0;
  float total = 0.0f;
  if (column_tile_total(op, x, view, blockIdx.x, begin, end, partials, o, total))
    chunk_partials[o * gridDim.y + s] = total;
}

}  // namespace

void cuda_reduce_view(ReduceOp op, const float* x, float* out, const ReduceView& view, float* scratch,
                      cudaStream_t stream) {
  const std::int64_t outputs = view.outer * view.inner;
  if (outputs <= 0) return;
  const ReducePlan plan = plan_reduce(view);
  switch (plan.kernel) {
    case ReducePlan::thread_per_output: {
      const LaunchConfig cfg = launch_config(outputs);
      view_thread_per_output<<<cfg.blocks, cfg.threads, 0, stream>>>(op, x, out, view);
      break;
    }
    case ReducePlan::warp_per_output: {
      const LaunchConfig cfg = launch_config(outputs * kWarp);
      view_warp_per_output<<<cfg.blocks, cfg.threads, 0, stream>>>(op, x, out, view);
      break;
    }
    case ReducePlan::chunks_then_totals: {
      // outputs < kReduceBlockPerOutputMaxOutputs and chunks <= ceil(target / outputs):
      // at most target + outputs partials, within kReduceScratchFloats.
      const dim3 grid(static_cast<unsigned>(plan.chunks), static_cast<unsigned>(outputs));
      view_chunks<<<grid, kReduceChunkThreads, 0, stream>>>(op, x, scratch, view, plan.chunk);
      cuda_check(cudaGetLastError(), "view_chunks kernel launch", __FILE__, __LINE__);
      const LaunchConfig cfg = launch_config(outputs * kWarp);
      view_chunk_totals<<<cfg.blocks, cfg.threads, 0, stream>>>(op, scratch, out, plan.chunks, view.count, outputs);
      break;
    }
    case ReducePlan::column_chunks: {
      // chunks * outputs <= kReduceScratchFloats (plan_reduce).
      const dim3 grid(static_cast<unsigned>(view.outer * reduce_ceil_div(view.inner, kWarp)),
                      static_cast<unsigned>(plan.chunks));
      view_column_chunks<<<grid, dim3(kWarp, kReduceColumnRowLanes), 0, stream>>>(op, x, scratch, view, plan.chunk);
      cuda_check(cudaGetLastError(), "view_column_chunks kernel launch", __FILE__, __LINE__);
      const LaunchConfig cfg = launch_config(outputs * kWarp);
      view_chunk_totals<<<cfg.blocks, cfg.threads, 0, stream>>>(op, scratch, out, plan.chunks, view.count, outputs);
      break;
    }
    case ReducePlan::column_tiles: {
      const std::int64_t tiles = view.outer * reduce_ceil_div(view.inner, kWarp);
      const dim3 block(kWarp, kReduceColumnRowLanes);
      view_column_tiles<<<static_cast<unsigned>(std::min<std::int64_t>(tiles, kLaunchMaxBlocks)), block, 0, stream>>>(
          op, x, out, view);
      break;
    }
  }
  cuda_check(cudaGetLastError(), "reduce kernel launch", __FILE__, __LINE__);
}

void cuda_reduce(ReduceOp op, const float* x, float* out, const ReduceIndex& index,
                 std::int64_t out_count, cudaStream_t stream) {
  if (out_count <= 0) return;
  if (index.count < kReduceThreadPerOutputBelow) {
    const LaunchConfig cfg = launch_config(out_count);
    reduce_thread_per_output<<<cfg.blocks, cfg.threads, 0, stream>>>(op, x, out, index, out_count);
  } else if (index.count >= kReduceBlockPerOutputFrom && out_count < kReduceBlockPerOutputMaxOutputs) {
    reduce_block_per_output<<<static_cast<int>(out_count), kLaunchThreads, 0, stream>>>(op, x, out, index, out_count);
  } else {
    const LaunchConfig cfg = launch_config(out_count * kWarp);
    reduce_warp_per_output<<<cfg.blocks, cfg.threads, 0, stream>>>(op, x, out, index, out_count);
  }
  cuda_check(cudaGetLastError(), "reduce kernel launch", __FILE__, __LINE__);
}

}  // namespace tessera
