#include "distribution/spmd_context.hpp"

#include "distribution/collectives/group_plan.hpp"
#include "distribution/sharding.hpp"

namespace tessera {

SpmdContext::SpmdContext(const DeviceMesh& mesh, Communicator& comm, int rank)
    : comm_(&comm), rank_(rank), coordinates_(mesh.coordinates(rank)) {
  const std::uint32_t masks = 1u << mesh.rank();
  groups_.resize(masks);
  for (std::uint32_t mask = 0; mask < masks; ++mask) {
    // The same groups, in the same order, as the NCCL communicator splits (group_plan.hpp).
    const GroupPlace place = group_places(mesh, mask)[static_cast<std::size_t>(rank)];
    groups_[mask] = CommGroup{groups_of(mesh, mask)[static_cast<std::size_t>(place.color)], axes_label(mask, mesh)};
  }
}

const CommGroup& SpmdContext::group(std::uint32_t mesh_axes) const {
  if (mesh_axes >= groups_.size())
    throw Error("collective over mesh axes bit set " + std::to_string(mesh_axes) + ", the mesh has " +
                std::to_string(coordinates_.size()) + " axes");
  return groups_[mesh_axes];
}

}  // namespace tessera
