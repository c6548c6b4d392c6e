#include "distribution/process_placement.hpp"

#include "engine/core/error.hpp"

namespace tessera {

void ProcessPlacement::check(std::int64_t mesh_size) const {
  if (processes < 1 || process < 0 || process >= processes)
    throw LayoutError("process " + std::to_string(process) + " of " + std::to_string(processes) + " is not a valid placement");
  if (mesh_size % processes != 0)
    throw LayoutError("the mesh has " + std::to_string(mesh_size) + " devices, which " + std::to_string(processes) +
                      " processes cannot share evenly (each process owns the same number of consecutive devices)");
}

std::vector<int> ProcessPlacement::local_ranks(std::int64_t mesh_size) const {
  std::vector<int> ranks;
  for (int r = first_rank(mesh_size), end = r + ranks_per_process(mesh_size); r < end; ++r) ranks.push_back(r);
  return ranks;
}

std::string ProcessPlacement::str() const {
  return "process " + std::to_string(process) + " of " + std::to_string(processes);
}

}  // namespace tessera
