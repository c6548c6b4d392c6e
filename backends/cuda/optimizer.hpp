// Fused optimizer updates (SGD, Adam/AdamW) and the moving average of batch
// norm statistics as host/device element functions, with the CPU backend's
// formulas (backends/cpu/optimizer.cpp): optimizer.cu launches them over the
// parameters, tests check them on the host against the CPU backend.
//
// The per-step scalars (Adam's step size with its bias corrections, the decoupled decay factor) are
// computed once on the host (optimizer_steps.hpp), in double as the CPU
// backend does, so every element sees the same floats. No engine headers
// here: the kernels compile as C++17.
#pragma once

#include <math.h>

#include <cstdint>

#include "backends/host_device.hpp"

namespace tessera {

// Keras' SGD: v = momentum * v - lr * g; p += v (nesterov: p += momentum * v - lr * g),
// g with the L2 term wd * p added. Without momentum the velocity is untouched.
struct SgdStep {
  float lr = 0.0f, momentum = 0.0f, weight_decay = 0.0f;
  bool nesterov = false;

  TESSERA_HOST_DEVICE void operator()(float* p, const float* g, float* v, std::int64_t i) const {
    const float gi = g[i] + weight_decay * p[i];
    if (momentum == 0.0f) {
      p[i] -= lr * gi;
      return;
    }
    const float vi = momentum * v[i] - lr * gi;
    v[i] = vi;
    p[i] += nesterov ? momentum * vi - lr * gi : vi;
  }
};

struct AdamStep {
  float b1 = 0.9f, b2 = 0.999f, eps = 1e-7f;
  float alpha = 1e-3f;  // Keras 3's step size: lr * sqrt(1 - b2^t) / (1 - b1^t)
  float decay = 1.0f;  // AdamW's 1 - lr * wd, else 1
  float l2 = 0.0f;     // Adam's wd added to the gradient, else 0

  TESSERA_HOST_DEVICE void operator()(float* p, const float* g, float* m, float* v,
                                      std::int64_t i) const {
    const float gi = g[i] + l2 * p[i];
    const float mi = b1 * m[i] + (1.0f - b1) * gi;
    const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - alpha * mi / (::sqrtf(vi) + eps);
  }
};

// state = momentum * state + (1 - momentum) * value.
TESSERA_HOST_DEVICE inline float moving_average_element(float state, float value, float momentum) {
  return momentum * state + (1.0f - momentum) * value;
}

}  // namespace tessera
