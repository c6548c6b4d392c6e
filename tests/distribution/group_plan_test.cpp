// The communication groups of every set of mesh axes: one plan (color, key)
// for the shared-memory contexts and the NCCL communicator's splits.
#include <doctest/doctest.h>

#include <algorithm>

#include "distribution/collectives/group_plan.hpp"

using namespace tessera;

namespace {

// Reference: the ranks whose coordinates agree outside `mask`, in rank order.
std::vector<std::vector<int>> brute_force(const DeviceMesh& mesh, std::uint32_t mask) {
  std::vector<std::vector<int>> groups;
  std::vector<bool> seen(static_cast<std::size_t>(mesh.size()), false);
  for (std::int64_t r = 0; r < mesh.size(); ++r) {
    if (seen[static_cast<std::size_t>(r)]) continue;
    std::vector<int> group;
    for (std::int64_t o = 0; o < mesh.size(); ++o) {
      bool same = true;
      for (int a = 0; a < mesh.rank(); ++a)
        if (!(mask & (1u << a)) && mesh.coordinates(o)[static_cast<std::size_t>(a)] != mesh.coordinates(r)[static_cast<std::size_t>(a)])
          same = false;
      if (same) group.push_back(static_cast<int>(o)), seen[static_cast<std::size_t>(o)] = true;
    }
    groups.push_back(group);
  }
  return groups;
}

}  // namespace

TEST_CASE("group plans: every axis set of 1-, 2- and 3-axis meshes matches the brute-force groups") {
  const std::vector<DeviceMesh> meshes = {
      DeviceMesh({8}, {"batch"}, cpu_devices(8)),
      DeviceMesh({2, 4}, {"batch", "model"}, cpu_devices(8)),
      DeviceMesh({4, 2}, {"batch", "model"}, cpu_devices(8)),
      DeviceMesh({2, 2, 2}, {"data", "fsdp", "model"}, cpu_devices(8)),
  };
  for (const auto& mesh : meshes)
    for (std::uint32_t mask = 0; mask < (1u << mesh.rank()); ++mask) {
      INFO(mesh.str() << ", axes bit set " << mask);
      auto groups = groups_of(mesh, mask);
      auto reference = brute_force(mesh, mask);
      std::sort(groups.begin(), groups.end());
      CHECK(groups == reference);
      // Color and key place each rank where groups_of lists it.
      const auto places = group_places(mesh, mask);
      const auto by_color = groups_of(mesh, mask);
      for (std::size_t r = 0; r < places.size(); ++r)
        CHECK(by_color[static_cast<std::size_t>(places[r].color)][static_cast<std::size_t>(places[r].key)] == static_cast<int>(r));
    }
}

TEST_CASE("group plans agree with DeviceMesh::groups_along and name colors and keys as NCCL splits need") {
  DeviceMesh mesh({2, 4}, {"batch", "model"}, cpu_devices(8));
  for (int a = 0; a < 2; ++a) {
    auto along = mesh.groups_along(mesh.axis_names()[static_cast<std::size_t>(a)]);
    auto groups = groups_of(mesh, 1u << a);
    REQUIRE(along.size() == groups.size());
    for (std::size_t g = 0; g < groups.size(); ++g)
      CHECK(std::vector<std::int64_t>(groups[g].begin(), groups[g].end()) == along[g]);
  }
  const auto model = group_places(mesh, 0b10);
  CHECK(model[6].color == 1);  // rank 6 = (1, 2): the second row
  CHECK(model[6].key == 2);
  const auto batch = group_places(mesh, 0b01);
  CHECK(batch[6].color == 2);  // its column
  CHECK(batch[6].key == 1);
}
