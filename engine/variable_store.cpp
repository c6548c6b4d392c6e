#include "engine/variable_store.hpp"

namespace tessera {
namespace {

// A variable's storage: running out of memory names the variable.
Tensor storage_for(const std::string& path, const Shape& shape, DType dtype) {
  try {
    return Tensor::empty(shape, dtype);
  } catch (const OutOfMemoryError& e) {
    throw OutOfMemoryError("variable '" + path + "' (" + std::string(dtype_name(dtype)) + shape.str() + "): " + e.what());
  }
}

}  // namespace

Variable* VariableStore::existing(const std::string& path, const Shape& shape, DType dtype) {
  Variable* v = find(path);
  if (v != nullptr && (v->shape() != shape || v->dtype() != dtype))
    throw ShapeError("variable '" + path + "' exists as " + std::string(dtype_name(v->dtype())) + v->shape().str() +
                     " but is asked for as " + std::string(dtype_name(dtype)) + shape.str());
  return v;
}

Variable& VariableStore::get_or_create(const std::string& path, const Shape& shape, DType dtype, bool trainable,
                                       std::vector<std::string> axis_roles, BlockInit init) {
  if (Variable* v = existing(path, shape, dtype)) return *v;
  Variable v{path, Tensor(), trainable, std::move(axis_roles), shape, dtype, std::move(init)};
  if (!defer_) materialize(v);  // before it is listed: a failure leaves the store as it was
  variables_.push_back(std::move(v));
  return variables_.back();
}

const Tensor& VariableStore::materialize(Variable& v) {
  if (v.deferred()) {
    Tensor value = storage_for(v.path, v.deferred_shape, v.deferred_dtype);
    const std::vector<std::int64_t> origin(static_cast<std::size_t>(value.shape().rank()), 0);
    v.init(value, origin);
    v.value = value;
  }
  return v.value;
}

Variable* VariableStore::find(const std::string& path) {
  for (auto& v : variables_)
    if (v.path == path) return &v;
  return nullptr;
}

std::int64_t VariableStore::parameter_count(bool trainable_only) const {
  std::int64_t n = 0;
  for (const auto& v : variables_)
    if (v.trainable || !trainable_only) n += v.shape().numel();
  return n;
}

}  // namespace tessera
