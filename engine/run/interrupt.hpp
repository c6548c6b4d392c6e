// Ctrl-C (SIGINT), SIGTERM and SIGUSR1 during a fit: caught, so that fit()
// stops after the step it is in and saves that position as a checkpoint
// (FitCallbacks::interrupted), instead of the process dying and losing the
// epoch it was in. `tessera train` uses it, and says how to resume. A
// scheduler's SIGTERM before it kills a job (Slurm, Kubernetes, a
// preemptible machine) is caught alike, and so is SIGUSR1: mpirun passes it
// on to every process of a job and kills none (a SIGTERM or SIGINT it turns
// into SIGTERM then SIGKILL to all, odls_base_sigkill_timeout seconds
// apart), and Slurm sends it ahead of a time limit (`--signal=USR1@120`).
//
//   InterruptCatcher signals;                  // from here until it is released
//   FitCallbacks callbacks;
//   callbacks.interrupted = [&] { return signals.caught() != 0; };
//   // in a job of several processes: signals.caught_by_job(processes, timeout) != 0
//   trainer.fit(train, nullptr, callbacks);
//
// Only the first signal is caught: it puts all three back to their default, so
// a second one ends the process at once, as without this (a save in progress
// is then lost, never the checkpoint before it: saves replace a checkpoint
// only once complete). A signal the process was started ignoring (SIGINT of
// a job a script put in the background) stays ignored. One catcher at a time:
// the signals' handlers are the process's.
//
// In a job of several processes a signal may reach one process, or all at
// different steps, while a save is collective: after each step every process
// asks caught_by_job(), which gives each the same answer.
#pragma once

#include <array>
#include <chrono>
#include <csignal>
#include <string>

#include "distribution/collectives/process_group.hpp"

namespace tessera {

class InterruptCatcher {
 public:
  // The signals caught, in the order caught_by_job() prefers them.
  static constexpr std::array<int, 3> kSignals{SIGINT, SIGTERM, SIGUSR1};

  // Catches kSignals from now on.
  InterruptCatcher();
  // release(), if not done yet.
  ~InterruptCatcher();
  InterruptCatcher(const InterruptCatcher&) = delete;
  InterruptCatcher& operator=(const InterruptCatcher&) = delete;

  // The signal this process caught so far, or 0.
  int caught() const;
  // The signal that stops a job of several processes: the first of kSignals
  // that any of them caught, or 0. Every process calls it after the same
  // step and gets the same answer (an exchange of a few numbers), so all stop
  // there together; a process that does not join within `timeout` ends the
  // job (ProcessGroup).
  int caught_by_job(ProcessGroup& processes, std::chrono::milliseconds timeout) const;
  // Puts back what handled the signals before, then returns caught(): a
  // signal after that is handled as before, none is lost in between.
  int release();

 private:
  bool released_ = false;
  std::array<struct sigaction, kSignals.size()> previous_{};
};

// "SIGINT", "SIGTERM", "SIGUSR1"; "signal N" for another.
std::string signal_name(int signal);

}  // namespace tessera
