// The optimizer steps of optimizer.hpp built from the Backend interface's
// SgdArgs and AdamArgs, on the host (op_args.hpp is C++20, the kernels are
// compiled as C++17, hence a header of its own).
#pragma once

#include <cmath>

#include "backends/cuda/optimizer.hpp"
#include "backends/op_args.hpp"

namespace tessera {

inline SgdStep make_sgd_step(const SgdArgs& args) {
  return {args.learning_rate, args.momentum, args.weight_decay, args.nesterov};
}

inline AdamStep make_adam_step(const AdamArgs& args) {
  const auto t = static_cast<double>(args.step);
  AdamStep s;
  s.b1 = args.beta1;
  s.b2 = args.beta2;
  s.eps = args.epsilon;
  s.alpha = static_cast<float>(args.learning_rate * std::sqrt(1.0 - std::pow(static_cast<double>(s.b2), t)) /
                               (1.0 - std::pow(static_cast<double>(s.b1), t)));
  s.decay = args.decoupled_weight_decay ? 1.0f - args.learning_rate * args.weight_decay : 1.0f;
  s.l2 = args.decoupled_weight_decay ? 0.0f : args.weight_decay;
  return s;
}

}  // namespace tessera
