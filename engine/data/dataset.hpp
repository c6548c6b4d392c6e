// Dataset: samples held in host memory, the input of the batch iterator.
//
// inputs is [N, ...] (f32 features or i32 tokens); targets is [N] i32 class
// labels or [N, ...] f32/i32 (regression targets, next-token targets);
// weights, when defined, is [N] f32: each sample's weight in the loss (Keras'
// sample_weight). All are reference-counted tensors, so copying a Dataset
// shares the samples.
#pragma once

#include <cstdint>
#include <string>

#include "engine/core/tensor.hpp"

namespace tessera {

struct Dataset {
  Tensor inputs;
  Tensor targets;
  std::string source;  // where the samples came from, for messages ("train.csv")
  std::string where{};  // the config key that declared it ("run.yaml:10:3: data.train"), or ""
  Tensor weights{};     // [N] f32, or undefined: every sample weighs 1

  // "data 'train.csv'", after where it was declared: how messages name it.
  std::string label() const { return (where.empty() ? "" : where + ": ") + "data '" + source + "'"; }

  // Number of samples (the leading extent); 0 for an empty Dataset.
  std::int64_t size() const {
    return inputs.defined() && inputs.rank() > 0 ? inputs.shape()[0] : 0;
  }
};

}  // namespace tessera
