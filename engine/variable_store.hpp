// VariableStore: the persistent tensors of a model (weights, optimizer state),
// by Keras-style path ("sequential/dense_1/kernel"), in creation order.
//
// Every graph traced from a model (training, evaluation, prediction, any batch
// size) binds its variable leaves to these tensors, so they share one copy.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/core/tensor.hpp"

namespace tessera {

struct Variable {
  std::string path;
  Tensor value;
  bool trainable = true;
  // Per axis, its role for tensor parallelism: "in" (contracted with the layer's
  // input features), "out" (the layer's output features), or "" (neither).
  std::vector<std::string> axis_roles;
};

class VariableStore {
 public:
  // The variable at `path`, created by `init` (which fills a new host tensor)
  // on first use; a second use must ask for the same shape and dtype.
  Variable& get_or_create(const std::string& path, const Shape& shape, DType dtype, bool trainable,
                          std::vector<std::string> axis_roles,
                          const std::function<void(const Tensor&)>& init);
  Variable* find(const std::string& path);
  const std::vector<Variable>& variables() const { return variables_; }
  std::vector<Variable>& variables() { return variables_; }
  std::int64_t parameter_count(bool trainable_only = true) const;

 private:
  std::vector<Variable> variables_;
};

}  // namespace tessera
