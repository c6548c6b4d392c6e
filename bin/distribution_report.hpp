// What the tessera program prints about a distribution: how each variable is
// split (`tessera inspect`), which device holds which block of one tensor
// (`inspect --visualize`), and the collectives of a run (bytes and time per
// kind and mesh axis).
#pragma once

#include <string>
#include <vector>

#include "distribution/auto_tp.hpp"
#include "distribution/collectives/communicator.hpp"
#include "distribution/collectives/process_group.hpp"
#include "distribution/strategies.hpp"
#include "distribution/spmd_program.hpp"

namespace tessera {

// type auto's candidates (mesh, strategy, predicted time, memory) and its choice.
void print_auto_choice(const AutoChoice& choice, std::int64_t memory_limit);
// AutoTP's rule for each layer, and why.
void print_auto_tp(const AutoTpPlan& plan);
// "note:" lines for the paths that layout_map_match's other rule would decide otherwise.
void print_key_match_differences(const LayoutMap& map, const std::vector<std::string>& paths);
// Per variable: layout, global and per-device shapes and bytes, the layout-map
// key that decided (or "replicated, no key matched"); keys that matched
// nothing; per-device memory of one training step; the step's collectives.
// With `auto_tp`, variables are said to be decided by it rather than by a key.
void print_sharding(const Distribution& distribution, const SpmdProgram& program,
                    const std::vector<std::string>& output_paths, const AutoTpPlan* auto_tp = nullptr);
// Which devices hold which block of variable `path` (a grid for rank <= 2).
void print_blocks(const Distribution& distribution, const SpmdProgram& program, const std::string& path);
// One row per (collective kind, mesh axes): calls, bytes and seconds summed
// over devices (job_collectives: over every process's).
void print_collectives(const std::map<CollectiveAccounting::Key, CollectiveStats>& total);
// The communicator's totals summed over the job's processes: every process
// runs the same program, so each has the same (kind, axes) keys. Called by
// every process of a job at once.
std::map<CollectiveAccounting::Key, CollectiveStats> job_collectives(const Communicator& comm,
                                                                    ProcessGroup& processes = job_processes());

}  // namespace tessera
