// Losses with Keras' names, built as graph ops on the model's output.
#pragma once

#include <string>

#include "engine/graph/graph.hpp"

namespace tessera {

class ConfigNode;

struct LossSpec {
  std::string type = "sparse_categorical_crossentropy";  // also categorical_crossentropy,
                                                         // binary_crossentropy, mse
  bool from_logits = false;
};

// `training.loss`: a name or {type, from_logits}; throws ConfigError.
LossSpec parse_loss(ConfigNode node);

// The dtype and per-sample shape a target of this loss has, given the model's
// per-sample output shape (sparse labels drop the class axis and are i32).
DType loss_target_dtype(const LossSpec& loss);
Shape loss_target_shape(const LossSpec& loss, const Shape& output);

// The mean loss over every target element: a scalar value.
ValueId build_loss(Graph& graph, const LossSpec& loss, ValueId output, ValueId target);

}  // namespace tessera
