// SpmdContext: what one device's executor needs to run the collectives of a
// partitioned graph: the communicator, its rank, and the communication group
// of every set of mesh axes.
#pragma once

#include <cstdint>
#include <vector>

#include "distribution/collectives/communicator.hpp"
#include "distribution/device_mesh.hpp"

namespace tessera {

class SpmdContext {
 public:
  SpmdContext(const DeviceMesh& mesh, Communicator& comm, int rank);

  Communicator& comm() const { return *comm_; }
  int rank() const { return rank_; }
  // The devices that differ from this one only along the axes in `mesh_axes`
  // (bit a = mesh axis a), in rank order.
  const CommGroup& group(std::uint32_t mesh_axes) const;
  // This device's position along mesh axis `axis`.
  std::int64_t coordinate(int axis) const { return coordinates_[static_cast<std::size_t>(axis)]; }

 private:
  Communicator* comm_;
  int rank_;
  std::vector<std::int64_t> coordinates_;
  std::vector<CommGroup> groups_;  // indexed by the axes bit set
};

}  // namespace tessera
