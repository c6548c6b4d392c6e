// Ctrl-C (SIGINT) and SIGTERM during `tessera train`: the run stops after the
// step it is in, saves that position as a checkpoint and says how to resume,
// instead of losing the epoch it was in. A scheduler's SIGTERM before it
// kills a job (Slurm, Kubernetes, a preemptible machine) is caught alike.
//
// A second signal is not caught: it ends the process at once, as without
// this (a save in progress is then lost, never the checkpoint before it:
// saves replace a checkpoint only once complete).
#pragma once

#include <csignal>

namespace tessera {

class InterruptCatcher {
 public:
  // Catches SIGINT and SIGTERM from now on (once each).
  InterruptCatcher();
  // Puts back what handled them before.
  ~InterruptCatcher();
  InterruptCatcher(const InterruptCatcher&) = delete;
  InterruptCatcher& operator=(const InterruptCatcher&) = delete;

  // The signal caught since construction, or 0.
  int caught() const;

 private:
  struct sigaction previous_int_ {}, previous_term_ {};
};

}  // namespace tessera
