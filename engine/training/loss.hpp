// Losses with Keras' names, built as graph ops on the model's output.
#pragma once

#include <string>
#include <vector>

#include "engine/graph/graph.hpp"

namespace tessera {

class ConfigNode;

struct LossSpec {
  // sparse_categorical_crossentropy, categorical_crossentropy,
  // binary_crossentropy, mse, mae or huber (loss_names()).
  std::string type = "sparse_categorical_crossentropy";
  bool from_logits = false;
  // Cross-entropies: targets pulled toward uniform, as Keras' label_smoothing:
  // y (1 - s) + s / classes (binary: + s / 2). Keras offers it for the
  // categorical and binary cross-entropies; here the sparse one takes it too.
  double label_smoothing = 0;
  double delta = 1.0;  // huber: where the loss turns from quadratic to linear
};

// The names `training.loss` accepts (with Keras' aliases mean_squared_error,
// mean_absolute_error).
const std::vector<std::string>& loss_names();

// `training.loss`: a name or {type, from_logits, label_smoothing, delta};
// throws ConfigError at the key.
LossSpec parse_loss(ConfigNode node);

// The dtype and per-sample shape a target of this loss has, given the model's
// per-sample output shape (sparse labels drop the class axis and are i32).
DType loss_target_dtype(const LossSpec& loss);
Shape loss_target_shape(const LossSpec& loss, const Shape& output);

// The loss over a batch: a scalar value. Without `sample_weight` the mean over
// every element; with it ([N] f32), Keras' sum_over_batch_size: each sample's
// mean loss times its weight, summed and divided by N.
ValueId build_loss(Graph& graph, const LossSpec& loss, ValueId output, ValueId target, ValueId sample_weight = -1);

}  // namespace tessera
