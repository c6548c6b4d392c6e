#include "engine/variable_store.hpp"

namespace tessera {

Variable& VariableStore::get_or_create(const std::string& path, const Shape& shape, DType dtype,
                                       bool trainable, std::vector<std::string> axis_roles,
                                       const std::function<void(const Tensor&)>& init) {
  if (Variable* existing = find(path)) {
    if (existing->value.shape() != shape || existing->value.dtype() != dtype)
      throw ShapeError("variable '" + path + "' exists as " + existing->value.describe() +
                       " but is asked for as " + std::string(dtype_name(dtype)) + shape.str());
    return *existing;
  }
  Tensor value = Tensor::empty(shape, dtype);
  init(value);
  variables_.push_back(Variable{path, value, trainable, std::move(axis_roles)});
  return variables_.back();
}

Variable* VariableStore::find(const std::string& path) {
  for (auto& v : variables_)
    if (v.path == path) return &v;
  return nullptr;
}

std::int64_t VariableStore::parameter_count(bool trainable_only) const {
  std::int64_t n = 0;
  for (const auto& v : variables_)
    if (v.trainable || !trainable_only) n += v.value.numel();
  return n;
}

}  // namespace tessera
