#include "engine/training/sample_weights.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/registry.hpp"
#include "engine/config/config.hpp"

namespace tessera {

ClassWeights parse_class_weight(const ConfigNode& node) {
  if (!node.is_map()) node.fail("class_weight maps class ids to weights, as {0: 1.0, 1: 5.0}");
  ClassWeights result;
  for (const std::string& key : node.keys()) {
    ConfigNode weight = node[key];
    std::size_t used = 0;
    std::int64_t id = -1;
    try {
      id = std::stoll(key, &used);
    } catch (const std::exception&) {
    }
    if (id < 0 || used != key.size()) weight.fail("'" + key + "' is not a class id (an integer >= 0)");
    const auto value = weight.as<double>();
    if (!(std::isfinite(value) && value >= 0)) weight.fail("a class weight must be a finite number >= 0");
    result.weights[id] = value;
  }
  result.where = node.location() + ": " + node.path();
  return result;
}

namespace {

// `data`'s own weights as f32 values, checked.
std::vector<float> given_weights(const Dataset& data, std::int64_t n) {
  const Tensor& given = data.weights;
  if (given.rank() == 0 || given.shape()[0] != n || given.numel() != n || given.device().kind != DeviceKind::cpu)
    throw ShapeError(data.label() + " has sample weights " + given.describe() + " for " + std::to_string(n) +
                     " samples: give one weight per sample, [" + std::to_string(n) + "] in host memory");
  Tensor f32 = given;
  if (given.dtype() != DType::f32) {  // integers, bf16
    f32 = Tensor::empty(given.shape(), DType::f32);
    backend_for(Device::cpu()).cast(given, f32);
  }
  std::vector<float> values = f32.to_vector<float>();
  for (std::size_t i = 0; i < values.size(); ++i)
    if (!(std::isfinite(values[i]) && values[i] >= 0))  // a negative weight pushes the model away from a sample
      throw DataError(data.label() + "'s sample weight " + std::to_string(i) + " is " + std::to_string(values[i]) +
                      ": weights must be finite numbers >= 0");
  return values;
}

// Multiplies each sample's weight by its class's.
void apply_class_weights(const Dataset& data, const Tensor& targets, const ClassWeights& class_weights,
                         const Shape& output, std::vector<float>& weights) {
  const auto n = static_cast<std::int64_t>(weights.size());
  const std::int64_t per_sample = targets.numel() / n;
  const std::int64_t classes = output[output.rank() - 1];
  const bool dense_row = targets.dtype() == DType::f32 && per_sample == classes && output.rank() == 1 && classes > 1;
  if (per_sample != 1 && !dense_row)
    throw ShapeError(class_weights.where + ": class_weight weighs each sample by its class, but " + data.label() +
                     " has " + std::to_string(per_sample) + " target values per sample (" + targets.describe() +
                     ") with no one class; give sample weights (Dataset::weights) instead");
  const std::int64_t known = classes == 1 ? 2 : classes;  // a single unit: classes 0 and 1
  for (const auto& entry : class_weights.weights)
    if (entry.first >= known)
      throw ConfigError(class_weights.where + ": class_weight names class " + std::to_string(entry.first) +
                        ", but the model's output has " + std::to_string(known) + " classes (0 to " +
                        std::to_string(known - 1) + ")");
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t id = 0;
    if (targets.dtype() == DType::i32) {
      id = targets.data<std::int32_t>()[i];
    } else if (dense_row) {  // the first largest entry, as Keras' argmax
      const float* row = targets.data<float>() + i * classes;
      id = std::max_element(row, row + classes) - row;
    } else {
      id = std::lround(targets.data<float>()[i]);  // Keras rounds binary targets
    }
    if (auto w = class_weights.weights.find(id); w != class_weights.weights.end())
      weights[static_cast<std::size_t>(i)] *= static_cast<float>(w->second);
  }
}

}  // namespace

Tensor sample_weights(const Dataset& data, const Tensor& targets, const ClassWeights* class_weights, const Shape& output) {
  const std::int64_t n = targets.shape()[0];
  std::vector<float> weights = data.weights.defined() ? given_weights(data, n)
                                                      : std::vector<float>(static_cast<std::size_t>(n), 1.0f);
  if (class_weights != nullptr && !class_weights->empty())
    apply_class_weights(data, targets, *class_weights, output, weights);
  return Tensor::from_vector(weights, Shape{n});
}

}  // namespace tessera
