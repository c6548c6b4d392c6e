// The constants of one Adam step, shared by the CPU's update kernels
// (optimizer.cpp, update_by_product.cpp) so that both compute the same update.
#pragma once

#include <cmath>

#include "backends/op_args.hpp"

namespace tessera {

// Per element: g += l2 p; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g g;
// p = p decay - alpha m / (sqrt(v) + eps).
struct AdamStep {
  float b1, b2, eps, alpha, decay, l2;
};

// Keras 3's form: the bias corrections fold into the step size, and epsilon
// is added to sqrt(v) itself (not to the corrected sqrt(v / (1 - b2^t))).
inline AdamStep adam_step(const AdamArgs& args) {
  const auto t = static_cast<double>(args.step);
  const float lr = args.learning_rate;
  const auto alpha = static_cast<float>(lr * std::sqrt(1.0 - std::pow(static_cast<double>(args.beta2), t)) /
                                        (1.0 - std::pow(static_cast<double>(args.beta1), t)));
  return AdamStep{.b1 = args.beta1,
                  .b2 = args.beta2,
                  .eps = args.epsilon,
                  .alpha = alpha,
                  .decay = args.decoupled_weight_decay ? 1.0f - lr * args.weight_decay : 1.0f,
                  .l2 = args.decoupled_weight_decay ? 0.0f : args.weight_decay};
}

}  // namespace tessera
