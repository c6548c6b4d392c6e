#include "distribution/tensor_layout.hpp"

#include <algorithm>

#include "engine/core/error.hpp"

namespace tessera {

bool TensorLayout::is_replicated() const {
  return std::all_of(axes_.begin(), axes_.end(), [](const auto& a) { return !a.has_value(); });
}

TensorLayout TensorLayout::padded_to(int rank) const {
  std::vector<std::optional<std::string>> axes = axes_;
  if (static_cast<int>(axes.size()) < rank) axes.resize(static_cast<std::size_t>(rank));
  return TensorLayout(std::move(axes));
}

void TensorLayout::validate(const std::string& path, const Shape& shape, const DeviceMesh& mesh) const {
  std::string where = "layout " + str() + " of '" + path + "' " + shape.str();
  if (rank() != shape.rank())
    throw LayoutError(where + ": the layout has " + std::to_string(rank()) + " entries for a tensor of rank " +
                      std::to_string(shape.rank()) +
                      (rank() > shape.rank() ? " (a shorter layout is padded with None at the end, a longer one is an error)" : ""));
  for (int d = 0; d < rank(); ++d) {
    const auto& axis = axes_[static_cast<std::size_t>(d)];
    if (!axis) continue;
    if (!mesh.has_axis(*axis)) {
      std::string names;
      for (const auto& n : mesh.axis_names()) names += (names.empty() ? "" : ", ") + n;
      throw LayoutError(where + ": dimension " + std::to_string(d) + " names mesh axis '" + *axis +
                        "', which the mesh lacks (its axes: " + names + ")");
    }
    for (int e = 0; e < d; ++e)
      if (axes_[static_cast<std::size_t>(e)] == axis)
        throw LayoutError(where + ": mesh axis '" + *axis + "' shards both dimension " + std::to_string(e) +
                          " and dimension " + std::to_string(d));
    std::int64_t parts = mesh.axis_size(*axis);
    if (shape[d] % parts != 0)
      throw LayoutError(where + ": dimension " + std::to_string(d) + " of size " + std::to_string(shape[d]) +
                        " is not divisible by mesh axis '" + *axis + "' of size " + std::to_string(parts));
  }
}

Shape TensorLayout::shard_shape(const Shape& shape, const DeviceMesh& mesh) const {
  Shape out = shape;
  for (int d = 0; d < rank(); ++d)
    if (const auto& axis = axes_[static_cast<std::size_t>(d)]) out[d] = shape[d] / mesh.axis_size(*axis);
  return out;
}

std::string TensorLayout::str() const {
  std::string s = "[";
  for (std::size_t i = 0; i < axes_.size(); ++i) s += (i ? ", " : "") + (axes_[i] ? *axes_[i] : std::string("None"));
  return s + "]";
}

}  // namespace tessera
