// MpiSession: MPI for the lifetime of a process that mpirun started.
//
//   int main(int argc, char** argv) {
//     std::optional<MpiSession> mpi;
//     if (MpiSession::launched_by_mpirun()) mpi.emplace();
//     ... ProcessPlacement where = MpiSession::placement();   // process 0 of 1 without MPI
//   }
//
// Device threads call collectives at once, so MPI is initialised with
// MPI_THREAD_MULTIPLE. A process not started by mpirun does not initialise
// MPI at all (OpenMPI's singleton start is slow and noisy), and is one
// process of one. The functions below that talk to the other processes are
// for the host side of a run (the trainer's metrics and store), never for
// device threads inside a step.
#pragma once

#include <chrono>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "distribution/process_placement.hpp"

namespace tessera {

class MpiSession {
 public:
  // Whether this process was started by mpirun (its environment says so).
  static bool launched_by_mpirun();
  // Whether Tessera was built with MPI.
  static bool available();

  // MPI_Init_thread. Throws UnsupportedError when built without MPI, or when
  // the MPI library lacks MPI_THREAD_MULTIPLE.
  MpiSession();
  ~MpiSession();  // MPI_Finalize
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  // This process's place in the job: from MPI while a session is active, else process 0 of 1.
  static ProcessPlacement placement();
  // Ends every process of the job with `code` (MPI_Abort); returns without a session.
  static void abort_job(int code);

  // Host-side exchanges over every process of the job (no-ops in one
  // process). When a process does not join within `timeout`, the job ends
  // (MPI_Abort) after printing what was exchanged and who was waited for.
  // values[i] = sum over processes of values[i].
  static void sum_over_processes(std::span<double> values, std::chrono::milliseconds timeout);
  // bytes[i] = OR over processes of bytes[i]: merges tensors that each process
  // filled in its own parts of (zeros elsewhere), bit-exactly for any dtype.
  static void merge_over_processes(std::span<std::byte> bytes, std::chrono::milliseconds timeout);
  // Waits for every process.
  static void barrier(std::chrono::milliseconds timeout);
  // bytes of every process = bytes of process 0 (a decision one process
  // makes for all, such as type: auto's choice, which timings could sway).
  static void broadcast_from_first(std::span<std::byte> bytes, std::chrono::milliseconds timeout);

  // What a process says when others did not join an exchange in time:
  // "process 0 waited 3.000 s for processes 1, which did not join (one stopped or is stuck)".
  static std::string not_joined(int process, std::chrono::milliseconds waited, const std::vector<int>& others);
};

}  // namespace tessera
