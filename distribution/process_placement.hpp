// ProcessPlacement: which devices of a mesh this process owns when a job runs
// as several processes (mpirun -np N). The mesh's devices are the job's, in
// rank order; process p owns the contiguous ranks [p*K, (p+1)*K) with
// K = mesh size / processes, so `devices: cpu:8` means the same mesh whether
// one process holds all 8 devices or 4 processes hold 2 each.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera {

struct ProcessPlacement {
  int process = 0;    // this process's index (its MPI rank)
  int processes = 1;  // processes in the job

  // Throws LayoutError when `mesh_size` devices cannot be split evenly over the processes.
  void check(std::int64_t mesh_size) const;
  int ranks_per_process(std::int64_t mesh_size) const { return static_cast<int>(mesh_size / processes); }
  int owner(int rank, std::int64_t mesh_size) const { return rank / ranks_per_process(mesh_size); }
  int first_rank(std::int64_t mesh_size) const { return process * ranks_per_process(mesh_size); }
  // This process's mesh ranks, ascending.
  std::vector<int> local_ranks(std::int64_t mesh_size) const;
  bool multi_process() const { return processes > 1; }
  std::string str() const;  // "process 1 of 4"
};

}  // namespace tessera
