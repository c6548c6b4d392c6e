// Each sample's weight in the loss: Keras' sample_weight (Dataset::weights)
// times its class's weight (Keras' class_weight, `training.class_weight`).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "engine/core/tensor.hpp"
#include "engine/data/dataset.hpp"

namespace tessera {

class ConfigNode;

// `class_weight: {0: 1.0, 1: 5.0}`: a weight per class id; classes not
// named weigh 1, as in Keras.
struct ClassWeights {
  std::map<std::int64_t, double> weights;
  std::string where;  // "run.yaml:12:3: training.class_weight", for messages; may be empty
  bool empty() const { return weights.empty(); }
};

// Throws ConfigError at the entry: a key that is not a class id (an integer
// >= 0), a weight that is not a finite number >= 0.
ClassWeights parse_class_weight(const ConfigNode& node);

// [N] f32: `data`'s own weights (any number type, [N] or [N, 1], each
// finite and >= 0), or 1, times each sample's class weight when
// `class_weights` is not null. A sample's class is its label (i32 targets
// with one value per sample), the first largest entry of a one-hot row (as
// Keras' argmax; outputs [N, classes]), or a single binary target rounded.
// `targets` are the loss's (converted, [N, ...]); `output` the model's
// per-sample output shape, whose last extent counts the classes. Throws
// ShapeError or DataError naming the data, ConfigError at the class_weight
// key for a class the output does not have.
Tensor sample_weights(const Dataset& data, const Tensor& targets, const ClassWeights* class_weights, const Shape& output);

}  // namespace tessera
