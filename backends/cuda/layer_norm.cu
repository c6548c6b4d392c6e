// Layer norm kernels (layer_norm.hpp). Forward and dx: rows of at least
// kLayerNormWarpFrom features get a warp each, lane l reading features
// l, l + 32, ... (coalesced), the lanes' sums meeting in a shuffle tree;
// shorter rows a thread each. dgamma and dbeta: a block per tile of 32
// features × 16 row-lanes, thread (f, w) summing feature f over rows
// w, w + 16, ... (a warp reads 32 adjacent floats of a row), then row-lane 0
// adding the 16 partials in order from shared memory. No atomics, no scratch:
// every run gives the same bits.
#include "backends/cuda/layer_norm_kernels.hpp"

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/launch.hpp"
#include "backends/cuda/warp_tree.hpp"

namespace tessera {
namespace {

constexpr int kWarp = kWarpLanes;
static_assert(kLaunchThreads % kWarp == 0, "whole warps per block");

// The param-grad tile: a warp's width of features, and row-lanes (warps) that
// split the rows.
constexpr int kParamFeatures = kWarp;
constexpr int kParamRowLanes = 16;

// Out: float, or std::uint16_t for y rounded to bf16 (a cast fused into the op).
template <typename Out>
__global__ void layer_norm_kernel(const float* x, const float* gamma, const float* beta, Out* y,
                                  float* mean, float* rstd, std::int64_t rows,
                                  std::int64_t features, float epsilon) {
  for (std::int64_t r = first_index(); r < rows; r += grid_stride())
    layer_norm_row(x, gamma, beta, y, mean, rstd, features, epsilon, r);
}

// Warp w of the grid takes rows w, w + warps, ...: the bound is the same for
// the whole warp, so every lane reaches each shuffle.
template <typename Out>
__global__ void layer_norm_warp_kernel(const float* x, const float* gamma, const float* beta,
                                       Out* y, float* mean, float* rstd, std::int64_t rows,
                                       std::int64_t features, float epsilon) {
  const std::int64_t lane = threadIdx.x % kWarp, warps = grid_stride() / kWarp;
  for (std::int64_t r = first_index() / kWarp; r < rows; r += warps) {
    const float mu =
        layer_norm_mean(warp_sum(layer_norm_partial_sum(x, features, r, lane, kWarp)), features);
    const float rs = layer_norm_rstd(
        warp_sum(layer_norm_partial_squares(x, features, r, mu, lane, kWarp)), features, epsilon);
    layer_norm_write(x, gamma, beta, y, features, r, mu, rs, lane, kWarp);
    if (lane == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
  }
}

__global__ void layer_norm_dx_kernel(const float* x, const float* gamma, const float* mean,
                                     const float* rstd, const float* dy, float* dx,
                                     std::int64_t rows, std::int64_t features) {
  for (std::int64_t r = first_index(); r < rows; r += grid_stride())
    layer_norm_backward_row(x, gamma, mean, rstd, dy, dx, features, r);
}

__global__ void layer_norm_dx_warp_kernel(const float* x, const float* gamma, const float* mean,
                                          const float* rstd, const float* dy, float* dx,
                                          std::int64_t rows, std::int64_t features) {
  const std::int64_t lane = threadIdx.x % kWarp, warps = grid_stride() / kWarp;
  for (std::int64_t r = first_index() / kWarp; r < rows; r += warps) {
    const float mu = mean[r], rs = rstd[r];
    LayerNormGradSums sums = layer_norm_backward_partial(x, gamma, dy, features, r, mu, rs, lane, kWarp);
    sums.g = warp_sum(sums.g);
    sums.gx = warp_sum(sums.gx);
    layer_norm_backward_write(x, gamma, dy, dx, features, r, mu, rs, sums, lane, kWarp);
  }
}

// Block (kParamFeatures, kParamRowLanes) takes feature tiles blockIdx.x,
// blockIdx.x + gridDim.x, ...; the bound is the same for the whole block, so
// every thread reaches each __syncthreads.
// Block (tile, chunk) sums the rows of its chunk, [chunk * rows_per_chunk,
// ...), into dgamma and dbeta at chunk * features (the outputs themselves
// when there is one chunk, partials otherwise).
__global__ void __launch_bounds__(kParamFeatures * kParamRowLanes)
    layer_norm_param_grad_kernel(const float* x, const float* mean, const float* rstd,
                                 const float* dy, float* dgamma, float* dbeta, std::int64_t rows,
                                 std::int64_t features, std::int64_t rows_per_chunk) {
  const std::int64_t first_row = static_cast<std::int64_t>(blockIdx.y) * rows_per_chunk;
  const std::int64_t chunk_rows =
      first_row + rows_per_chunk < rows ? rows_per_chunk : (rows > first_row ? rows - first_row : 0);
  x += first_row * features;
  dy += first_row * features;
  mean += first_row;
  rstd += first_row;
  dgamma += static_cast<std::int64_t>(blockIdx.y) * features;
  dbeta += static_cast<std::int64_t>(blockIdx.y) * features;
  rows = chunk_rows;
  __shared__ float dgamma_part[kParamRowLanes][kParamFeatures];
  __shared__ float dbeta_part[kParamRowLanes][kParamFeatures];
  const int column = static_cast<int>(threadIdx.x), row_lane = static_cast<int>(threadIdx.y);
  const std::int64_t tiles = (features + kParamFeatures - 1) / kParamFeatures;
  for (std::int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const std::int64_t f = tile * kParamFeatures + column;
    LayerNormParamSums part;
    if (f < features)
      part = layer_norm_param_grad_partial(x, mean, rstd, dy, rows, features, f, row_lane,
                                           kParamRowLanes);
    dgamma_part[row_lane][column] = part.dgamma;
    dbeta_part[row_lane][column] = part.dbeta;
    __syncthreads();
    if (row_lane == 0 && f < features) {
      float dg = dgamma_part[0][column], db = dbeta_part[0][column];
      for (int w = 1; w < kParamRowLanes; ++w) {
        dg += dgamma_part[w][column];
        db += dbeta_part[w][column];
      }
      dgamma[f] = dg;
      dbeta[f] = db;
    }
    __syncthreads();  // the partials are rewritten by the next tile
  }
}

// dgamma[f] and dbeta[f]: the chunks' partials added in chunk order.
__global__ void layer_norm_param_chunk_totals(const float* partial_dgamma, const float* partial_dbeta,
                                              float* dgamma, float* dbeta, std::int64_t features,
                                              std::int64_t chunks) {
  for (std::int64_t f = first_index(); f < features; f += grid_stride()) {
    float dg = partial_dgamma[f], db = partial_dbeta[f];
    for (std::int64_t c = 1; c < chunks; ++c) {
      dg += partial_dgamma[c * features + f];
      db += partial_dbeta[c * features + f];
    }
    dgamma[f] = dg;
    dbeta[f] = db;
  }
}

template <typename Out>
void launch_layer_norm(const float* x, const float* gamma, const float* beta, Out* y, float* mean,
                       float* rstd, std::int64_t rows, std::int64_t features, float epsilon,
                       cudaStream_t stream) {
  if (features == 0 || rows <= 0) return;
  if (layer_norm_warp_per_row(features)) {
    const LaunchConfig cfg = launch_config(rows * kWarp);
    layer_norm_warp_kernel<<<cfg.blocks, cfg.threads, 0, stream>>>(x, gamma, beta, y, mean, rstd,
                                                                   rows, features, epsilon);
    cuda_check(cudaGetLastError(), "layer_norm_warp_kernel<<<blocks, 256, 0, stream>>>", __FILE__,
               __LINE__);
  } else {
    const LaunchConfig cfg = launch_config(rows);
    layer_norm_kernel<<<cfg.blocks, cfg.threads, 0, stream>>>(x, gamma, beta, y, mean, rstd, rows,
                                                              features, epsilon);
    cuda_check(cudaGetLastError(), "layer_norm_kernel<<<blocks, 256, 0, stream>>>", __FILE__,
               __LINE__);
  }
}

}  // namespace

void cuda_layer_norm(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                     float* rstd, std::int64_t rows, std::int64_t features, float epsilon,
                     cudaStream_t stream) {
  launch_layer_norm(x, gamma, beta, y, mean, rstd, rows, features, epsilon, stream);
}

void cuda_layer_norm(const float* x, const float* gamma, const float* beta, std::uint16_t* y, float* mean,
                     float* rstd, std::int64_t rows, std::int64_t features, float epsilon,
                     cudaStream_t stream) {
  launch_layer_norm(x, gamma, beta, y, mean, rstd, rows, features, epsilon, stream);
}

void cuda_layer_norm_backward(const float* x, const float* gamma, const float* mean,
                              const float* rstd, const float* dy, float* dx, float* dgamma,
                              float* dbeta, std::int64_t rows, std::int64_t features,
                              float* scratch, std::int64_t scratch_floats, cudaStream_t stream) {
  if (features <= 0) return;
  if (rows > 0 && layer_norm_warp_per_row(features)) {
    const LaunchConfig cfg = launch_config(rows * kWarp);
    layer_norm_dx_warp_kernel<<<cfg.blocks, cfg.threads, 0, stream>>>(x, gamma, mean, rstd, dy, dx,
                                                                      rows, features);
    cuda_check(cudaGetLastError(), "layer_norm_dx_warp_kernel<<<blocks, 256, 0, stream>>>",
               __FILE__, __LINE__);
  } else if (rows > 0) {
    const LaunchConfig cfg = launch_config(rows);
    layer_norm_dx_kernel<<<cfg.blocks, cfg.threads, 0, stream>>>(x, gamma, mean, rstd, dy, dx, rows,
                                                                 features);
    cuda_check(cudaGetLastError(), "layer_norm_dx_kernel<<<blocks, 256, 0, stream>>>", __FILE__,
               __LINE__);
  }
  // With no rows this still runs, writing zeros.
  const LayerNormParamChunks plan = layer_norm_param_chunks(rows, features, scratch_floats);
  const std::int64_t tiles = (features + kParamFeatures - 1) / kParamFeatures;
  const dim3 grid(static_cast<unsigned>(tiles < kLaunchMaxBlocks ? tiles : kLaunchMaxBlocks),
                  static_cast<unsigned>(plan.chunks));
  float* partial_dgamma = plan.chunks == 1 ? dgamma : scratch;
  float* partial_dbeta = plan.chunks == 1 ? dbeta : scratch + plan.chunks * features;
  layer_norm_param_grad_kernel<<<grid, dim3(kParamFeatures, kParamRowLanes), 0, stream>>>(
      x, mean, rstd, dy, partial_dgamma, partial_dbeta, rows, features, plan.rows_per_chunk);
  cuda_check(cudaGetLastError(), "layer_norm_param_grad_kernel<<<(tiles, chunks), (32, 16), 0, stream>>>",
             __FILE__, __LINE__);
  if (plan.chunks == 1) return;
  const LaunchConfig cfg = launch_config(features);
  layer_norm_param_chunk_totals<<<cfg.blocks, cfg.threads, 0, stream>>>(partial_dgamma, partial_dbeta, dgamma,
                                                                        dbeta, features, plan.chunks);
  cuda_check(cudaGetLastError(), "layer_norm_param_chunk_totals<<<blocks, 256, 0, stream>>>", __FILE__,
             __LINE__);
}

}  // namespace tessera
