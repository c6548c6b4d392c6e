#include "distribution/device_mesh.hpp"

#include <algorithm>

#include "engine/core/error.hpp"

namespace tessera {
namespace {

std::string join(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

std::string dims_str(const std::vector<std::int64_t>& dims) {
  std::string s = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

}  // namespace

DeviceMesh::DeviceMesh(std::vector<std::int64_t> shape, std::vector<std::string> axis_names,
                       std::vector<Device> devices)
    : shape_(std::move(shape)), axis_names_(std::move(axis_names)), devices_(std::move(devices)) {
  if (shape_.empty()) throw ShapeError("device mesh: the shape is empty; give one extent per mesh axis");
  if (axis_names_.size() != shape_.size())
    throw ShapeError("device mesh: shape " + dims_str(shape_) + " has " + std::to_string(shape_.size()) +
                     " axes but " + std::to_string(axis_names_.size()) + " axis names were given (" +
                     join(axis_names_) + ")");
  if (shape_.size() > kMaxMeshAxes)
    throw ShapeError("device mesh: shape " + dims_str(shape_) + " has " + std::to_string(shape_.size()) +
                     " axes; a mesh has at most " + std::to_string(kMaxMeshAxes));
  std::int64_t product = 1;
  for (std::size_t i = 0; i < shape_.size(); ++i) {
    if (shape_[i] < 1)
      throw ShapeError("device mesh: axis '" + axis_names_[i] + "' has extent " + std::to_string(shape_[i]) +
                       "; extents must be >= 1");
    if (axis_names_[i].empty()) throw ShapeError("device mesh: axis " + std::to_string(i) + " has an empty name");
    if (std::count(axis_names_.begin(), axis_names_.end(), axis_names_[i]) > 1)
      throw ShapeError("device mesh: axis name '" + axis_names_[i] + "' is used twice in (" + join(axis_names_) + ")");
    if (__builtin_mul_overflow(product, shape_[i], &product))
      throw ShapeError("device mesh: shape " + dims_str(shape_) + " holds more devices than a 64-bit count");
  }
  if (product != static_cast<std::int64_t>(devices_.size()))
    throw ShapeError("device mesh: shape " + dims_str(shape_) + " holds " + std::to_string(product) +
                     " devices but " + std::to_string(devices_.size()) + " were given");
  for (std::size_t i = 0; i < devices_.size(); ++i)
    if (std::find(devices_.begin(), devices_.begin() + static_cast<std::ptrdiff_t>(i), devices_[i]) !=
        devices_.begin() + static_cast<std::ptrdiff_t>(i))
      throw ShapeError("device mesh: device " + devices_[i].str() + " appears twice");
}

bool DeviceMesh::has_axis(const std::string& name) const {
  return std::find(axis_names_.begin(), axis_names_.end(), name) != axis_names_.end();
}

int DeviceMesh::axis_index(const std::string& name) const {
  auto it = std::find(axis_names_.begin(), axis_names_.end(), name);
  if (it == axis_names_.end())
    throw ShapeError("device mesh: no axis named '" + name + "'; the mesh's axes are (" + join(axis_names_) + ")");
  return static_cast<int>(it - axis_names_.begin());
}

std::vector<std::int64_t> DeviceMesh::coordinates(std::int64_t rank) const {
  std::vector<std::int64_t> coords(shape_.size());
  for (std::size_t i = shape_.size(); i-- > 0;) {
    coords[i] = rank % shape_[i];
    rank /= shape_[i];
  }
  return coords;
}

std::vector<std::vector<std::int64_t>> DeviceMesh::groups_along(const std::string& axis) const {
  int a = axis_index(axis);
  std::int64_t stride = 1;
  for (std::size_t i = static_cast<std::size_t>(a) + 1; i < shape_.size(); ++i) stride *= shape_[i];
  std::vector<std::vector<std::int64_t>> groups;
  for (std::int64_t rank = 0; rank < size(); ++rank) {
    if (coordinates(rank)[static_cast<std::size_t>(a)] != 0) continue;  // each group starts at coordinate 0
    std::vector<std::int64_t> group;
    for (std::int64_t k = 0; k < shape_[static_cast<std::size_t>(a)]; ++k) group.push_back(rank + k * stride);
    groups.push_back(std::move(group));
  }
  return groups;
}

std::string DeviceMesh::str() const {
  return "mesh " + dims_str(shape_) + " (" + join(axis_names_) + ") over " + devices_.front().str() +
         (devices_.size() > 1 ? ".." + devices_.back().str() : "");
}

std::vector<Device> cpu_devices(int n) {
  std::vector<Device> devices;
  for (int i = 0; i < n; ++i) devices.push_back(Device::cpu(i));
  return devices;
}

}  // namespace tessera
