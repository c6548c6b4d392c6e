// CollectiveContext: what an executor of a partitioned graph needs from the
// device set it runs on, without knowing how devices talk: this device's
// position along each mesh axis, the size of its group along a set of axes,
// and the collectives over that group. distribution/SpmdContext implements it
// over a Communicator (shared memory, NCCL or MPI).
//
// `mesh_axes` is a bit set (bit a = mesh axis a), as in OpAttrs.
#pragma once

#include <cstdint>

#include "backends/op_kinds.hpp"
#include "engine/core/tensor.hpp"

namespace tessera {

class CollectiveContext {
 public:
  virtual ~CollectiveContext() = default;

  // This device's position along mesh axis `axis`.
  virtual std::int64_t coordinate(int axis) const = 0;
  // The number of devices that differ from this one only along `mesh_axes`.
  virtual std::int64_t group_size(std::uint32_t mesh_axes) const = 0;

  virtual void all_reduce(std::uint32_t mesh_axes, const Tensor& in, const Tensor& out, ReduceOp op) const = 0;
  virtual void all_gather(std::uint32_t mesh_axes, const Tensor& in, const Tensor& out, int dim) const = 0;
  virtual void reduce_scatter(std::uint32_t mesh_axes, const Tensor& in, const Tensor& out, int dim) const = 0;
  virtual void all_to_all(std::uint32_t mesh_axes, const Tensor& in, const Tensor& out, int split_dim,
                          int concat_dim) const = 0;
};

}  // namespace tessera
