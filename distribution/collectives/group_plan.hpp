// How a mesh's ranks form the communication groups of a set of mesh axes:
// the one definition that the shared-memory communicator's contexts and the
// NCCL communicator (ncclCommSplit's color and key) both use.
//
//   mesh [2, 4] (batch, model), axes {model}: groups {0,1,2,3} and {4,5,6,7};
//   rank 6 has color 1 (its group) and key 2 (its place in the group).
#pragma once

#include <cstdint>
#include <vector>

#include "distribution/device_mesh.hpp"

namespace tessera {

struct GroupPlace {
  int color = 0;  // which group: the same for ranks that differ only along the axes
  int key = 0;    // the rank's position in its group (row-major over the axes)
};

// Every rank's group and position for the axes in `mesh_axes` (bit a = axis a).
std::vector<GroupPlace> group_places(const DeviceMesh& mesh, std::uint32_t mesh_axes);
// The ranks of each group, by color, each in key order.
std::vector<std::vector<int>> groups_of(const DeviceMesh& mesh, std::uint32_t mesh_axes);

}  // namespace tessera
