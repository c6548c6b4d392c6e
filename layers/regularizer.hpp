// Keras' weight regularizers (kernel_regularizer, bias_regularizer): a
// penalty on a variable's values added to the loss, in training and
// evaluation alike, as Keras adds model.losses.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "engine/graph/graph.hpp"

namespace tessera {

class ConfigNode;
class Layer;

struct Regularizer {
  double l1 = 0;  // times the sum of |w|
  double l2 = 0;  // times the sum of w^2
};

// `l1` or `l2` (Keras' default factor 0.01 each), or `{l1: 1.0e-5, l2: 1.0e-4}`
// (either may be left out). Throws ConfigError at the key.
Regularizer parse_regularizer(const ConfigNode& node);

// Reads a layer's `kernel_regularizer` and `bias_regularizer` arguments into
// it (Layer::set_regularizer), for its variables `kernel` and `bias`.
void read_regularizers(const ConfigNode& args, Layer& layer);

// The sum of every penalty: l1 * sum|w| + l2 * sum w^2 per variable, a scalar.
ValueId regularization_penalty(Graph& graph, const std::vector<std::pair<ValueId, Regularizer>>& regularized);

}  // namespace tessera
