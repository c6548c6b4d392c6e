#include "distribution/sharding.hpp"

#include <algorithm>

#include "engine/core/error.hpp"

namespace tessera {

Sharding Sharding::from_layout(const TensorLayout& layout, const DeviceMesh& mesh) {
  Sharding s = replicated(layout.rank());
  for (int d = 0; d < layout.rank(); ++d)
    if (const auto& axis = layout.axes()[static_cast<std::size_t>(d)]) s.dims[static_cast<std::size_t>(d)] = mesh.axis_index(*axis);
  return s;
}

TensorLayout Sharding::to_layout(const DeviceMesh& mesh) const {
  std::vector<std::optional<std::string>> axes;
  for (int a : dims) axes.push_back(a == kNone ? std::nullopt : std::optional(mesh.axis_names()[static_cast<std::size_t>(a)]));
  return TensorLayout(std::move(axes));
}

bool Sharding::is_replicated() const { return partial == 0 && axes_used() == 0; }

bool Sharding::splits_rows_only() const {
  if (dims.empty() || dims[0] == kNone) return false;
  for (std::size_t d = 1; d < dims.size(); ++d)
    if (dims[d] != kNone) return false;
  return true;
}

bool Sharding::is_first_copy(const DeviceMesh& mesh, std::int64_t rank) const {
  const std::vector<std::int64_t> at = mesh.coordinates(rank);
  const std::uint32_t used = axes_used();
  for (int a = 0; a < mesh.rank(); ++a)
    if (!(used & (1u << a)) && at[static_cast<std::size_t>(a)] != 0) return false;
  return true;
}

std::uint32_t Sharding::axes_used() const {
  std::uint32_t used = partial;
  for (int a : dims)
    if (a != kNone) used |= 1u << a;
  return used;
}

int Sharding::dim_of_axis(int axis) const {
  for (int d = 0; d < rank(); ++d)
    if (dims[static_cast<std::size_t>(d)] == axis) return d;
  return kNone;
}

Shape Sharding::local_shape(const Shape& global, const DeviceMesh& mesh) const {
  if (global.rank() != rank())
    throw ShapeError("sharding " + str(mesh) + " has rank " + std::to_string(rank()) + " but the value is " + global.str());
  Shape local = global;
  for (int d = 0; d < rank(); ++d) {
    int a = dims[static_cast<std::size_t>(d)];
    if (a == kNone) continue;
    std::int64_t n = mesh.shape()[static_cast<std::size_t>(a)];
    if (global[d] % n != 0)
      throw LayoutError("dimension " + std::to_string(d) + " of size " + std::to_string(global[d]) +
                        " does not divide over mesh axis '" + mesh.axis_names()[static_cast<std::size_t>(a)] +
                        "' of size " + std::to_string(n));
    local[d] = global[d] / n;
  }
  return local;
}

std::vector<std::int64_t> Sharding::block_start(const Shape& global, const DeviceMesh& mesh, std::int64_t rank) const {
  Shape local = local_shape(global, mesh);
  auto coords = mesh.coordinates(rank);
  std::vector<std::int64_t> start(static_cast<std::size_t>(global.rank()), 0);
  for (int d = 0; d < global.rank(); ++d) {
    int a = dims[static_cast<std::size_t>(d)];
    if (a != kNone) start[static_cast<std::size_t>(d)] = coords[static_cast<std::size_t>(a)] * local[d];
  }
  return start;
}

std::string Sharding::str(const DeviceMesh& mesh) const {
  std::string s = to_layout(mesh).str();
  if (partial != 0) s += " partial(" + axes_label(partial, mesh) + ")";
  return s;
}

std::string axes_label(std::uint32_t mask, const DeviceMesh& mesh) {
  std::string label;
  for (int a = 0; a < mesh.rank(); ++a)
    if (mask & (1u << a)) label += (label.empty() ? "" : ",") + mesh.axis_names()[static_cast<std::size_t>(a)];
  return label;
}

std::pair<std::int64_t, std::int64_t> Sharding::rows_held(const Shape& global, const DeviceMesh& mesh,
                                                          const std::vector<int>& ranks) const {
  const std::int64_t rows = global.rank() > 0 ? global[0] : 1;
  if (!splits_rows_only()) return {0, rows};
  const std::int64_t block = local_shape(global, mesh)[0];
  std::int64_t begin = rows, end = 0;
  for (int rank : ranks) {
    const std::int64_t start = block_start(global, mesh, rank)[0];
    begin = std::min(begin, start);
    end = std::max(end, start + block);
  }
  return {begin, end};
}

}  // namespace tessera
