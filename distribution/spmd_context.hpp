// SpmdContext: what one device's executor needs to run the collectives of a
// partitioned graph: the communicator, its rank, and the communication group
// of every set of mesh axes.
#pragma once

#include <cstdint>
#include <vector>

#include "distribution/collectives/communicator.hpp"
#include "distribution/device_mesh.hpp"
#include "engine/graph/collective_context.hpp"

namespace tessera {

class SpmdContext final : public CollectiveContext {
 public:
  SpmdContext(const DeviceMesh& mesh, Communicator& comm, int rank);

  Communicator& comm() const { return *comm_; }
  int rank() const { return rank_; }
  // The devices that differ from this one only along the axes in `mesh_axes`
  // (bit a = mesh axis a), in rank order.
  const CommGroup& group(std::uint32_t mesh_axes) const;
  // This device's position along mesh axis `axis`.
  std::int64_t coordinate(int axis) const override { return coordinates_[static_cast<std::size_t>(axis)]; }

  // CollectiveContext, over this device's group along `mesh_axes`.
  std::int64_t group_size(std::uint32_t mesh_axes) const override {
    return static_cast<std::int64_t>(group(mesh_axes).size());
  }
  void all_reduce(std::uint32_t mesh_axes, const Tensor& in, const Tensor& out, ReduceOp op) const override {
    comm_->all_reduce(group(mesh_axes), rank_, in, out, op);
  }
  void all_gather(std::uint32_t mesh_axes, const Tensor& in, const Tensor& out, int dim) const override {
    comm_->all_gather(group(mesh_axes), rank_, in, out, dim);
  }
  void reduce_scatter(std::uint32_t mesh_axes, const Tensor& in, const Tensor& out, int dim) const override {
    comm_->reduce_scatter(group(mesh_axes), rank_, in, out, dim);
  }
  void all_to_all(std::uint32_t mesh_axes, const Tensor& in, const Tensor& out, int split_dim,
                  int concat_dim) const override {
    comm_->all_to_all(group(mesh_axes), rank_, in, out, split_dim, concat_dim);
  }

 private:
  Communicator* comm_;
  int rank_;
  std::vector<std::int64_t> coordinates_;
  std::vector<CommGroup> groups_;  // indexed by the axes bit set
};

}  // namespace tessera
