// ProcessGroup: the processes of a job, for the host side of a run (the
// trainer's metrics and store, decisions one process makes for all); device
// threads inside a step use a Communicator instead. Whoever needs it is
// given one (the SPMD runtime, the trainer through it, make_trainer) rather
// than calling MPI statically, so another group can stand in for the job's.
#pragma once

#include <chrono>
#include <cstddef>
#include <span>

#include "distribution/process_placement.hpp"

namespace tessera {

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;

  // This process's place in the group.
  virtual ProcessPlacement placement() const = 0;
  // When a process does not join an exchange within `timeout`, the job ends
  // after saying what was exchanged and who was waited for.
  // values[i] = sum over processes of values[i].
  virtual void sum(std::span<double> values, std::chrono::milliseconds timeout) = 0;
  // bytes[i] = OR over processes of bytes[i] (merges tensors each process
  // filled in its own parts of, bit-exactly for any dtype).
  virtual void merge(std::span<std::byte> bytes, std::chrono::milliseconds timeout) = 0;
  virtual void barrier(std::chrono::milliseconds timeout) = 0;
  // bytes of every process = bytes of process 0.
  virtual void broadcast_from_first(std::span<std::byte> bytes, std::chrono::milliseconds timeout) = 0;
};

// The job's processes: MPI's world when mpirun started this process and an
// MpiSession is active, else this process alone (every exchange a no-op).
ProcessGroup& job_processes();

}  // namespace tessera
