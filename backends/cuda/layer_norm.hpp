// Layer normalisation over the last axis, forward and backward, as host/device
// functions: layer_norm.cu runs one thread per row (forward, dx) and one
// thread per feature (dgamma, dbeta: a sum over rows, written without atomics
// so the result is deterministic). Tests check them on the host against the
// CPU backend (oneDNN).
//
// x is viewed as [rows, features]. The forward saves mean and
// rstd = 1 / sqrt(variance + epsilon) per row, the variance taken about the
// mean in a second pass (no cancellation of E[x²] - E[x]²).
#pragma once

#include <math.h>

#include <cstdint>

#include "backends/host_device.hpp"

namespace tessera {

// y = (x - mean) * rstd * gamma + beta for row `row`; writes mean[row], rstd[row].
TESSERA_HOST_DEVICE inline void layer_norm_row(const float* x, const float* gamma,
                                               const float* beta, float* y, float* mean,
                                               float* rstd, std::int64_t features,
                                               float epsilon, std::int64_t row) {
  const float* xr = x + row * features;
  float sum = 0.0f;
  for (std::int64_t f = 0; f < features; ++f) sum += xr[f];
  const float mu = sum / static_cast<float>(features);
  float squares = 0.0f;
  for (std::int64_t f = 0; f < features; ++f) squares += (xr[f] - mu) * (xr[f] - mu);
  const float r = 1.0f / ::sqrtf(squares / static_cast<float>(features) + epsilon);
  float* yr = y + row * features;
  for (std::int64_t f = 0; f < features; ++f) yr[f] = (xr[f] - mu) * r * gamma[f] + beta[f];
  mean[row] = mu;
  rstd[row] = r;
}

// dx of row `row`: with xhat = (x - mean) * rstd and g = dy * gamma,
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
TESSERA_HOST_DEVICE inline void layer_norm_backward_row(const float* x, const float* gamma,
                                                        const float* mean, const float* rstd,
                                                        const float* dy, float* dx,
                                                        std::int64_t features, std::int64_t row) {
  const float* xr = x + row * features;
  const float* dyr = dy + row * features;
  const float mu = mean[row], r = rstd[row];
  float g_sum = 0.0f, gx_sum = 0.0f;
  for (std::int64_t f = 0; f < features; ++f) {
    const float g = dyr[f] * gamma[f];
    g_sum += g;
    gx_sum += g * (xr[f] - mu) * r;
  }
  const float n = static_cast<float>(features);
  const float g_mean = g_sum / n, gx_mean = gx_sum / n;
  float* dxr = dx + row * features;
  for (std::int64_t f = 0; f < features; ++f)
    dxr[f] = r * (dyr[f] * gamma[f] - g_mean - (xr[f] - mu) * r * gx_mean);
}

// dgamma[feature] = sum over rows of dy * xhat, dbeta[feature] = sum of dy.
TESSERA_HOST_DEVICE inline void layer_norm_param_grad(const float* x, const float* mean,
                                                      const float* rstd, const float* dy,
                                                      float* dgamma, float* dbeta,
                                                      std::int64_t rows, std::int64_t features,
                                                      std::int64_t feature) {
  float dg = 0.0f, db = 0.0f;
  for (std::int64_t row = 0; row < rows; ++row) {
    const std::int64_t at = row * features + feature;
    dg += dy[at] * (x[at] - mean[row]) * rstd[row];
    db += dy[at];
  }
  dgamma[feature] = dg;
  dbeta[feature] = db;
}

}  // namespace tessera
