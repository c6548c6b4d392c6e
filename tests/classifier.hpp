// A small classifier (8 features, 3 classes) for the trainer's tests.
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

}  // namespace tessera::test
