// The oneDNN eltwise algorithm (and its alpha/beta) behind each unary op.
#pragma once

#include <optional>

#include <oneapi/dnnl/dnnl.hpp>

#include "backends/op_kinds.hpp"

namespace tessera {

struct EltwiseAlgorithm {
  dnnl::algorithm algorithm;
  float alpha = 0.0f;
  float beta = 0.0f;
};

// nullopt for the unary ops oneDNN has no eltwise algorithm for.
std::optional<EltwiseAlgorithm> eltwise_algorithm(UnaryOp op);

}  // namespace tessera
