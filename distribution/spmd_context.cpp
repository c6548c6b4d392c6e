#include "distribution/spmd_context.hpp"

#include "distribution/sharding.hpp"

namespace tessera {

SpmdContext::SpmdContext(const DeviceMesh& mesh, Communicator& comm, int rank)
    : comm_(&comm), rank_(rank), coordinates_(mesh.coordinates(rank)) {
  const std::uint32_t masks = 1u << mesh.rank();
  groups_.resize(masks);
  for (std::uint32_t mask = 0; mask < masks; ++mask) {
    CommGroup& group = groups_[mask];
    group.axes = axes_label(mask, mesh);
    for (std::int64_t other = 0; other < mesh.size(); ++other) {
      auto c = mesh.coordinates(other);
      bool same = true;
      for (int a = 0; a < mesh.rank(); ++a)
        if (!(mask & (1u << a)) && c[static_cast<std::size_t>(a)] != coordinates_[static_cast<std::size_t>(a)]) same = false;
      if (same) group.ranks.push_back(static_cast<int>(other));
    }
  }
}

const CommGroup& SpmdContext::group(std::uint32_t mesh_axes) const {
  if (mesh_axes >= groups_.size())
    throw Error("collective over mesh axes bit set " + std::to_string(mesh_axes) + ", the mesh has " +
                std::to_string(coordinates_.size()) + " axes");
  return groups_[mesh_axes];
}

}  // namespace tessera
