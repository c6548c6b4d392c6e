// Layer normalisation over the last axis, forward and backward, as host/device
// functions: tests check them on the host against the CPU backend (oneDNN),
// and layer_norm.cu runs them on the GPU.
//
// x is viewed as [rows, features]. The forward saves mean and
// rstd = 1 / sqrt(variance + epsilon) per row, the variance taken about the
// mean in a second pass (no cancellation of E[x²] - E[x]²).
//
// Each pass over a row is split among `lanes` threads: lane l visits features
// l, l + lanes, ... and the kernel combines the lanes' partials in a fixed
// tree, so runs repeat bit for bit. Rows of at least kLayerNormWarpFrom
// features get a warp each (32 lanes, coalesced loads); shorter rows a thread
// (lanes == 1: layer_norm_row, layer_norm_backward_row). dgamma and dbeta sum
// over rows: `lanes` row-lanes take rows l, l + lanes, ... of a feature, and
// the kernel adds their partials in row-lane order, without atomics.
#pragma once

#include <math.h>

#include <cstdint>

#include "backends/cuda/quad_access.hpp"
#include "backends/host_device.hpp"

namespace tessera {

// Below a warp's width a row would leave lanes idle.
inline constexpr std::int64_t kLayerNormWarpFrom = 32;

// Whether layer_norm.cu gives each row a warp (else a thread).
inline bool layer_norm_warp_per_row(std::int64_t features) { return features >= kLayerNormWarpFrom; }

// This lane's part of the sum of row `row`.
TESSERA_HOST_DEVICE inline float layer_norm_partial_sum(const float* x, std::int64_t features,
                                                        std::int64_t row, std::int64_t lane,
                                                        std::int64_t lanes) {
  const float* xr = x + row * features;
  float sum = 0.0f;
  for (std::int64_t f = lane; f < features; f += lanes) sum += xr[f];
  return sum;
}

TESSERA_HOST_DEVICE inline float layer_norm_mean(float sum, std::int64_t features) {
  return sum / static_cast<float>(features);
}

// This lane's part of the sum of (x - mu)², mu the whole row's mean.
TESSERA_HOST_DEVICE inline float layer_norm_partial_squares(const float* x, std::int64_t features,
                                                            std::int64_t row, float mu,
                                                            std::int64_t lane, std::int64_t lanes) {
  const float* xr = x + row * features;
  float squares = 0.0f;
  for (std::int64_t f = lane; f < features; f += lanes) squares += (xr[f] - mu) * (xr[f] - mu);
  return squares;
}

TESSERA_HOST_DEVICE inline float layer_norm_rstd(float squares, std::int64_t features, float epsilon) {
  return 1.0f / ::sqrtf(squares / static_cast<float>(features) + epsilon);
}

// y = (x - mu) * r * gamma + beta over this lane's features of row `row`.
// Out: float, or std::uint16_t for y rounded to bf16 bits as cast rounds.
template <typename Out>
TESSERA_HOST_DEVICE inline void layer_norm_write(const float* x, const float* gamma,
                                                 const float* beta, Out* y, std::int64_t features,
                                                 std::int64_t row, float mu, float r,
                                                 std::int64_t lane, std::int64_t lanes) {
  const float* xr = x + row * features;
  Out* yr = y + row * features;
  for (std::int64_t f = lane; f < features; f += lanes) store_element(yr, f, (xr[f] - mu) * r * gamma[f] + beta[f]);
}

// y = (x - mean) * rstd * gamma + beta for row `row`; writes mean[row], rstd[row].
// One lane, features ascending.
template <typename Out>
TESSERA_HOST_DEVICE inline void layer_norm_row(const float* x, const float* gamma,
                                               const float* beta, Out* y, float* mean,
                                               float* rstd, std::int64_t features,
                                               float epsilon, std::int64_t row) {
  const float mu = layer_norm_mean(layer_norm_partial_sum(x, features, row, 0, 1), features);
  const float r = layer_norm_rstd(layer_norm_partial_squares(x, features, row, mu, 0, 1), features,
                                  epsilon);
  layer_norm_write(x, gamma, beta, y, features, row, mu, r, 0, 1);
  mean[row] = mu;
  rstd[row] = r;
}

// The two sums of a row's dx: of g = dy * gamma, and of g * xhat.
struct LayerNormGradSums {
  float g = 0.0f, gx = 0.0f;
};

// This lane's part of the sums, with xhat = (x - mu) * r.
TESSERA_HOST_DEVICE inline LayerNormGradSums layer_norm_backward_partial(
    const float* x, const float* gamma, const float* dy, std::int64_t features, std::int64_t row,
    float mu, float r, std::int64_t lane, std::int64_t lanes) {
  const float* xr = x + row * features;
  const float* dyr = dy + row * features;
  LayerNormGradSums sums;
  for (std::int64_t f = lane; f < features; f += lanes) {
    const float g = dyr[f] * gamma[f];
    sums.g += g;
    sums.gx += g * (xr[f] - mu) * r;
  }
  return sums;
}

// dx over this lane's features, given the whole row's sums.
TESSERA_HOST_DEVICE inline void layer_norm_backward_write(const float* x, const float* gamma,
                                                          const float* dy, float* dx,
                                                          std::int64_t features, std::int64_t row,
                                                          float mu, float r, LayerNormGradSums sums,
                                                          std::int64_t lane, std::int64_t lanes) {
  const float* xr = x + row * features;
  const float* dyr = dy + row * features;
  const float n = static_cast<float>(features);
  const float g_mean = sums.g / n, gx_mean = sums.gx / n;
  float* dxr = dx + row * features;
  for (std::int64_t f = lane; f < features; f += lanes)
    dxr[f] = r * (dyr[f] * gamma[f] - g_mean - (xr[f] - mu) * r * gx_mean);
}

// dx of row `row`: with xhat = (x - mean) * rstd and g = dy * gamma,
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)). One lane, features
// ascending.
TESSERA_HOST_DEVICE inline void layer_norm_backward_row(const float* x, const float* gamma,
                                                        const float* mean, const float* rstd,
                                                        const float* dy, float* dx,
                                                        std::int64_t features, std::int64_t row) {
  const float mu = mean[row], r = rstd[row];
  const LayerNormGradSums sums = layer_norm_backward_partial(x, gamma, dy, features, row, mu, r, 0, 1);
  layer_norm_backward_write(x, gamma, dy, dx, features, row, mu, r, sums, 0, 1);
}

// dgamma and dbeta of one feature, or a row-lane's part of them.
struct LayerNormParamSums {
  float dgamma = 0.0f, dbeta = 0.0f;
};

// Row-lane `lane` of `lanes`'s part of dgamma[feature] = sum over rows of
// dy * xhat and dbeta[feature] = sum of dy: rows lane, lane + lanes, ...
TESSERA_HOST_DEVICE inline LayerNormParamSums layer_norm_param_grad_partial(
    const float* x, const float* mean, const float* rstd, const float* dy, std::int64_t rows,
    std::int64_t features, std::int64_t feature, std::int64_t lane, std::int64_t lanes) {
  LayerNormParamSums sums;
  for (std::int64_t row = lane; row < rows; row += lanes) {
    const std::int64_t at = row * features + feature;
    sums.dgamma += dy[at] * (x[at] - mean[row]) * rstd[row];
    sums.dbeta += dy[at];
  }
  return sums;
}

// dgamma[feature] and dbeta[feature] over every row, ascending.
TESSERA_HOST_DEVICE inline void layer_norm_param_grad(const float* x, const float* mean,
                                                      const float* rstd, const float* dy,
                                                      float* dgamma, float* dbeta,
                                                      std::int64_t rows, std::int64_t features,
                                                      std::int64_t feature) {
  const LayerNormParamSums sums =
      layer_norm_param_grad_partial(x, mean, rstd, dy, rows, features, feature, 0, 1);
  dgamma[feature] = sums.dgamma;
  dbeta[feature] = sums.dbeta;
}

// How the dgamma/dbeta kernel splits rows among blocks: few features make few
// feature tiles (768: 24 blocks), so the rows are cut into chunks of at least
// kLayerNormMinChunkRows, each block writing its chunk's partial sums, which a
// second kernel adds in chunk order (at most 2 * chunks * features partials,
// within `max_partials`). Depends on the shape only: every device adds in the
// same order.
inline constexpr std::int64_t kLayerNormMinChunkRows = 512;
inline constexpr std::int64_t kLayerNormMaxChunks = 16;

struct LayerNormParamChunks {
  std::int64_t rows_per_chunk = 0, chunks = 1;
};

inline LayerNormParamChunks layer_norm_param_chunks(std::int64_t rows, std::int64_t features,
                                                    std::int64_t max_partials) {
  std::int64_t chunks = rows / kLayerNormMinChunkRows;
  if (chunks > kLayerNormMaxChunks) chunks = kLayerNormMaxChunks;
  if (features > 0 && chunks > max_partials / (2 * features)) chunks = max_partials / (2 * features);
  if (chunks < 1) chunks = 1;
  const std::int64_t per_chunk = (rows + chunks - 1) / chunks;
  return {per_chunk, per_chunk == 0 ? 1 : (rows + per_chunk - 1) / per_chunk};
}

}  // namespace tessera
