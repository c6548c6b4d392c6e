// Sharding: how one value of the partitioned graph is held by the devices of a
// mesh. Per tensor dimension the mesh axis it is split along (or none), plus
// the set of mesh axes over which the devices hold partial sums that add up to
// the value (PyTorch DTensor's Partial, OneFlow's P).
//
//   Sharding s = Sharding::replicated(2);
//   s.dims[1] = model;           // columns split over the mesh axis `model`
//   s.local_shape({784, 1024}, mesh);   // [784, 1024 / |model|]
//
// A mesh axis appears at most once: in one dimension or in the partial set.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "distribution/device_mesh.hpp"
#include "distribution/tensor_layout.hpp"
#include "engine/core/shape.hpp"

namespace tessera {

struct Sharding {
  static constexpr int kNone = -1;
  std::vector<int> dims;      // per dimension: mesh axis index, or kNone
  std::uint32_t partial = 0;  // bit a: partial sum over mesh axis a

  static Sharding replicated(int rank) { return Sharding{std::vector<int>(static_cast<std::size_t>(rank), kNone), 0}; }
  // From a validated layout (axis names to indices).
  static Sharding from_layout(const TensorLayout& layout, const DeviceMesh& mesh);
  TensorLayout to_layout(const DeviceMesh& mesh) const;

  int rank() const { return static_cast<int>(dims.size()); }
  bool is_replicated() const;  // no split dimension and no partial sum
  // Mesh axes in use (split dimensions and partial sums), as a bit set.
  std::uint32_t axes_used() const;
  // The dimension split along mesh axis `axis`, or kNone.
  int dim_of_axis(int axis) const;
  // One device's block: each split dimension divided by its axis size.
  Shape local_shape(const Shape& global, const DeviceMesh& mesh) const;
  // Whether the first dimension is split and no other is (a batch).
  bool splits_rows_only() const;
  // Whether `rank` is the first device holding its block: its position is 0
  // along every mesh axis the sharding does not use (one writer per block).
  bool is_first_copy(const DeviceMesh& mesh, std::int64_t rank) const;
  // Where `rank`'s block starts along each dimension.
  std::vector<std::int64_t> block_start(const Shape& global, const DeviceMesh& mesh, std::int64_t rank) const;
  // The rows [begin, end) of a value of shape `global` that the blocks of
  // `ranks` cover (a process's devices): all of them unless the first
  // dimension alone is split.
  std::pair<std::int64_t, std::int64_t> rows_held(const Shape& global, const DeviceMesh& mesh,
                                                  const std::vector<int>& ranks) const;

  std::string str(const DeviceMesh& mesh) const;  // "[batch, None] partial(model)"
  bool operator==(const Sharding&) const = default;
};

// The names of the axes in `mask`, joined by ',' ("batch,model").
std::string axes_label(std::uint32_t mask, const DeviceMesh& mesh);

}  // namespace tessera
