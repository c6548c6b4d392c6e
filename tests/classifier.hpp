// Models for the trainer's tests: a small classifier (8 features, 3 classes),
// and the zoo's models (models/*.yaml).
#pragma once

#include "engine/config/config.hpp"
#include "layers/model.hpp"

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

inline Model zoo_model(const std::string& file) {
  return Model::from_config(ConfigNode::load_file(std::string(TESSERA_SOURCE_DIR) + "/models/" + file)["model"]);
}

}  // namespace tessera::test
