// Fused optimizer updates: one pass over param, grad and state per step.
#include <cmath>

#include "backends/cpu/cpu_backend.hpp"

namespace tessera {

void CpuBackend::run_sgd_update(const Tensor& param, const Tensor& grad, const Tensor& velocity,
                                const SgdArgs& args) {
  float* p = param.data<float>();
  const float* g = grad.data<float>();
  float* v = velocity.data<float>();
  std::int64_t n = param.numel();
  ThreadShare share(threads());
  // Keras' SGD: v = momentum * v - lr * g; p += v (nesterov: p += momentum * v - lr * g).
#pragma omp parallel for schedule(static) if (n > 65536)
  for (std::int64_t i = 0; i < n; ++i) {
    float gi = g[i] + args.weight_decay * p[i];
    if (args.momentum == 0.0f) {
      p[i] -= args.learning_rate * gi;
      continue;
    }
    v[i] = args.momentum * v[i] - args.learning_rate * gi;
    p[i] += args.nesterov ? args.momentum * v[i] - args.learning_rate * gi : v[i];
  }
}

void CpuBackend::run_adam_update(const Tensor& param, const Tensor& grad, const Tensor& m,
                                 const Tensor& v, const AdamArgs& args) {
  float* p = param.data<float>();
  const float* g = grad.data<float>();
  float* pm = m.data<float>();
  float* pv = v.data<float>();
  std::int64_t n = param.numel();
  auto t = static_cast<double>(args.step);
  float correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(args.beta1), t));
  float correction2 = static_cast<float>(1.0 - std::pow(static_cast<double>(args.beta2), t));
  float decay = args.decoupled_weight_decay ? 1.0f - args.learning_rate * args.weight_decay : 1.0f;
  float l2 = args.decoupled_weight_decay ? 0.0f : args.weight_decay;
  ThreadShare share(threads());
#pragma omp parallel for schedule(static) if (n > 65536)
  for (std::int64_t i = 0; i < n; ++i) {
    float gi = g[i] + l2 * p[i];
    pm[i] = args.beta1 * pm[i] + (1.0f - args.beta1) * gi;
    pv[i] = args.beta2 * pv[i] + (1.0f - args.beta2) * gi * gi;
    float m_hat = pm[i] / correction1;
    float v_hat = pv[i] / correction2;
    p[i] = p[i] * decay - args.learning_rate * m_hat / (std::sqrt(v_hat) + args.epsilon);
  }
}

}  // namespace tessera
