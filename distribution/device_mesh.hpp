// DeviceMesh: devices arranged in an n-dimensional grid with named axes, as
// Keras' keras.distribution.DeviceMesh (shape, axis_names, devices).
//
//   DeviceMesh mesh({2, 4}, {"batch", "model"}, cpu_devices(8));
//   mesh.axis_size("model");          // 4
//   mesh.groups_along("model");       // {{0,1,2,3}, {4,5,6,7}}: ranks that talk on that axis
//
// Devices fill the grid in row-major order (the last axis varies fastest).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/device.hpp"

namespace tessera {

// Shardings keep a set of mesh axes as the bits of a 32-bit word, and a device
// holds a communicator group per subset of axes (2^rank of them): far fewer
// axes than 32 keep both exact and small.
inline constexpr std::size_t kMaxMeshAxes = 16;

class DeviceMesh {
 public:
  // Throws ShapeError for an empty or non-positive shape, more than
  // kMaxMeshAxes axes, a name count that differs from the rank, duplicate or
  // empty axis names, or a device count that is not the product of the shape.
  DeviceMesh(std::vector<std::int64_t> shape, std::vector<std::string> axis_names,
             std::vector<Device> devices);

  int rank() const { return static_cast<int>(shape_.size()); }
  const std::vector<std::int64_t>& shape() const { return shape_; }
  const std::vector<std::string>& axis_names() const { return axis_names_; }
  const std::vector<Device>& devices() const { return devices_; }
  std::int64_t size() const { return static_cast<std::int64_t>(devices_.size()); }

  bool has_axis(const std::string& name) const;
  // Index of axis `name`; throws ShapeError listing the mesh's axes.
  int axis_index(const std::string& name) const;
  std::int64_t axis_size(const std::string& name) const { return shape_[static_cast<std::size_t>(axis_index(name))]; }

  // Grid coordinates of rank `rank` (its index in devices()).
  std::vector<std::int64_t> coordinates(std::int64_t rank) const;
  // The ranks that differ only along `axis`, one group per position of the
  // other axes: the participants of a collective over that axis.
  std::vector<std::vector<std::int64_t>> groups_along(const std::string& axis) const;

  std::string str() const;  // "mesh [2, 4] (batch, model) over cpu:0..cpu:7"

 private:
  std::vector<std::int64_t> shape_;
  std::vector<std::string> axis_names_;
  std::vector<Device> devices_;
};

// cpu:0 .. cpu:(n-1).
std::vector<Device> cpu_devices(int n);

}  // namespace tessera
