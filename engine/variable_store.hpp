// VariableStore: the persistent tensors of a model (weights, optimizer state),
// by Keras-style path ("sequential/dense_1/kernel"), in creation order.
//
// Every graph traced from a model (training, evaluation, prediction, any batch
// size) binds its variable leaves to these tensors, so they share one copy.
//
// A store may defer its values (defer_values): a variable then keeps its
// shape, dtype and initializer, and no storage, until something asks for the
// whole (materialize). A job of several processes defers, so that each device
// draws only its block of a sharded variable and no process holds the whole.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/core/tensor.hpp"

namespace tessera {

// Fills `block` with the values of the variable's elements from `start` on
// (one index per dimension): the same numbers whichever blocks are drawn.
using BlockInit = std::function<void(const Tensor& block, std::span<const std::int64_t> start)>;

struct Variable {
  std::string path;
  Tensor value;  // undefined while deferred
  bool trainable = true;
  // Per axis, its role for tensor parallelism: "in" (contracted with the layer's
  // input features), "out" (the layer's output features), or "" (neither).
  std::vector<std::string> axis_roles;
  // A deferred variable's shape and dtype, and the initializer of its blocks.
  Shape deferred_shape{};
  DType deferred_dtype = DType::f32;
  BlockInit init{};

  bool deferred() const { return !value.defined() && static_cast<bool>(init); }
  const Shape& shape() const { return value.defined() ? value.shape() : deferred_shape; }
  DType dtype() const { return value.defined() ? value.dtype() : deferred_dtype; }
};

class VariableStore {
 public:
  // The variable at `path`, created on first use with the values `init`
  // fills any block with (a deferring store keeps it and allocates nothing);
  // a second use must ask for the same shape and dtype.
  Variable& get_or_create(const std::string& path, const Shape& shape, DType dtype, bool trainable,
                          std::vector<std::string> axis_roles, BlockInit init);
  Variable* find(const std::string& path);
  const std::vector<Variable>& variables() const { return variables_; }
  std::vector<Variable>& variables() { return variables_; }
  std::int64_t parameter_count(bool trainable_only = true) const;

  // Whether variables created from now on with a BlockInit are deferred.
  void defer_values(bool defer) { defer_ = defer; }
  bool defers_values() const { return defer_; }
  // The whole value of `v`, allocated and initialised now if it was deferred.
  static const Tensor& materialize(Variable& v);

 private:
  Variable* existing(const std::string& path, const Shape& shape, DType dtype);

  std::vector<Variable> variables_;
  bool defer_ = false;
};

}  // namespace tessera
