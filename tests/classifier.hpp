// Models for the trainer's tests: a small classifier (8 features, 3 classes),
// and the zoo's models (models/*.yaml).
#pragma once

#include <string>
#include <vector>

#include "engine/config/config.hpp"
#include "layers/model.hpp"
#include "tests/source_tree.hpp"

namespace tessera::test {

inline Model classifier() {
  return Model::from_config(ConfigNode::parse(R"(
model:
  inputs: [{name: x, shape: [8]}]
  layers:
    - {type: Dense, units: 16, activation: relu}
    - {type: Dense, units: 3}
)")["model"]);
}

// `overrides` as `tessera train --set` takes them, e.g. "model.layers.1.units=64".
inline Model zoo_model(const std::string& file, const std::vector<std::string>& overrides = {}) {
  ConfigNode root = ConfigNode::load_file(source_path("models/" + file));
  for (const auto& assignment : overrides) apply_override(root, assignment);
  return Model::from_config(root["model"]);
}

// Overrides of models/gpt.yaml for a context of `tokens` instead of 128: the
// same layers, variables (but the position table) and layouts, for tests
// whose cost grows with the tokens of a batch.
inline std::vector<std::string> gpt_context(std::int64_t tokens) {
  return {"model.inputs.0.shape=[" + std::to_string(tokens) + "]", "model.layers.1.sequence_length=" + std::to_string(tokens)};
}

}  // namespace tessera::test
