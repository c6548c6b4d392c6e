// TensorLayout: how one tensor is split over a DeviceMesh, as Keras'
// keras.distribution.TensorLayout: per tensor dimension, the mesh axis it is
// sharded along, or none (replicated along every axis it does not name).
//
//   TensorLayout kernel({std::nullopt, "model"});   // [in, out]: columns split over "model"
//   kernel.validate("dense/kernel", {784, 1024}, mesh);
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "distribution/device_mesh.hpp"
#include "engine/core/shape.hpp"

namespace tessera {

class TensorLayout {
 public:
  TensorLayout() = default;
  explicit TensorLayout(std::vector<std::optional<std::string>> axes) : axes_(std::move(axes)) {}
  // All dimensions replicated.
  static TensorLayout replicated(int rank) { return TensorLayout(std::vector<std::optional<std::string>>(static_cast<std::size_t>(rank))); }

  int rank() const { return static_cast<int>(axes_.size()); }
  const std::vector<std::optional<std::string>>& axes() const { return axes_; }
  bool is_replicated() const;

  // This layout for a tensor of `rank`: a shorter one padded with None at the
  // end, as JAX reads a PartitionSpec (and so Keras' JAX backend); a longer
  // one unchanged (validate() then names both ranks).
  TensorLayout padded_to(int rank) const;
  // Checks that the layout fits tensor `path` of `shape` on `mesh`; throws
  // LayoutError for a rank mismatch, an axis the mesh lacks, a mesh axis used
  // twice, or a dimension not divisible by its mesh axis (naming the variable,
  // the dimension, its size and the axis size). Pad a shorter layout first.
  void validate(const std::string& path, const Shape& shape, const DeviceMesh& mesh) const;
  // The shape of one device's shard (validate first).
  Shape shard_shape(const Shape& shape, const DeviceMesh& mesh) const;

  std::string str() const;  // "[None, model]" as Keras prints it
  bool operator==(const TensorLayout& other) const = default;

 private:
  std::vector<std::optional<std::string>> axes_;
};

}  // namespace tessera
