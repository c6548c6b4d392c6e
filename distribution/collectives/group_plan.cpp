#include "distribution/collectives/group_plan.hpp"

namespace tessera {

std::vector<GroupPlace> group_places(const DeviceMesh& mesh, std::uint32_t mesh_axes) {
  std::vector<GroupPlace> places(static_cast<std::size_t>(mesh.size()));
  for (std::int64_t rank = 0; rank < mesh.size(); ++rank) {
    const auto c = mesh.coordinates(rank);
    // Row-major over the axes outside the set gives the color, over those inside the key.
    std::int64_t color = 0, key = 0;
    for (int a = 0; a < mesh.rank(); ++a) {
      const auto extent = mesh.shape()[static_cast<std::size_t>(a)], at = c[static_cast<std::size_t>(a)];
      if (mesh_axes & (1u << a)) key = key * extent + at;
      else color = color * extent + at;
    }
    places[static_cast<std::size_t>(rank)] = {static_cast<int>(color), static_cast<int>(key)};
  }
  return places;
}

std::vector<std::vector<int>> groups_of(const DeviceMesh& mesh, std::uint32_t mesh_axes) {
  const auto places = group_places(mesh, mesh_axes);
  std::int64_t members = 1;
  for (int a = 0; a < mesh.rank(); ++a)
    if (mesh_axes & (1u << a)) members *= mesh.shape()[static_cast<std::size_t>(a)];
  std::vector<std::vector<int>> groups(static_cast<std::size_t>(mesh.size() / members),
                                       std::vector<int>(static_cast<std::size_t>(members)));
  for (std::size_t rank = 0; rank < places.size(); ++rank)
    groups[static_cast<std::size_t>(places[rank].color)][static_cast<std::size_t>(places[rank].key)] = static_cast<int>(rank);
  return groups;
}

}  // namespace tessera
