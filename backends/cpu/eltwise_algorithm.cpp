#include "backends/cpu/eltwise_algorithm.hpp"

namespace tessera {

std::optional<EltwiseAlgorithm> eltwise_algorithm(UnaryOp op) {
  using dnnl::algorithm;
  switch (op) {
    case UnaryOp::neg: return EltwiseAlgorithm{algorithm::eltwise_linear, -1.0f, 0.0f};
    case UnaryOp::abs: return EltwiseAlgorithm{algorithm::eltwise_abs};
    case UnaryOp::relu: return EltwiseAlgorithm{algorithm::eltwise_relu, 0.0f};
    case UnaryOp::gelu_tanh: return EltwiseAlgorithm{algorithm::eltwise_gelu_tanh};
    case UnaryOp::gelu_erf: return EltwiseAlgorithm{algorithm::eltwise_gelu_erf};
    case UnaryOp::tanh: return EltwiseAlgorithm{algorithm::eltwise_tanh};
    case UnaryOp::sigmoid: return EltwiseAlgorithm{algorithm::eltwise_logistic};
    case UnaryOp::exp: return EltwiseAlgorithm{algorithm::eltwise_exp};
    case UnaryOp::log: return EltwiseAlgorithm{algorithm::eltwise_log};
    case UnaryOp::sqrt: return EltwiseAlgorithm{algorithm::eltwise_sqrt};
    case UnaryOp::rsqrt: return EltwiseAlgorithm{algorithm::eltwise_pow, 1.0f, -0.5f};
    case UnaryOp::square: return EltwiseAlgorithm{algorithm::eltwise_square};
    case UnaryOp::reciprocal: return EltwiseAlgorithm{algorithm::eltwise_pow, 1.0f, -1.0f};
  }
  return std::nullopt;
}

}  // namespace tessera
