// Ctrl-C (SIGINT) and SIGTERM during `tessera train`: the run stops after the
// step it is in, saves that position as a checkpoint and says how to resume,
// instead of losing the epoch it was in. A scheduler's SIGTERM before it
// kills a job (Slurm, Kubernetes, a preemptible machine) is caught alike.
//
// Only the first signal is caught: it puts both back to their default, so a
// second one (either) ends the process at once, as without this (a save in
// progress is then lost, never the checkpoint before it: saves replace a
// checkpoint only once complete). A signal the process was started ignoring
// (SIGINT of a job a script put in the background) stays ignored.
#pragma once

#include <csignal>
#include <string>
#include <vector>

namespace tessera {

class InterruptCatcher {
 public:
  // Catches SIGINT and SIGTERM from now on.
  InterruptCatcher();
  // release(), if not done yet.
  ~InterruptCatcher();
  InterruptCatcher(const InterruptCatcher&) = delete;
  InterruptCatcher& operator=(const InterruptCatcher&) = delete;

  // The signal caught so far, or 0.
  int caught() const;
  // Puts back what handled the signals before, then returns caught(): a
  // signal after that is handled as before, none is lost in between.
  int release();

 private:
  bool released_ = false;
  struct sigaction previous_int_ {}, previous_term_ {};
};

// The shell command that resumes a run started as `tessera` with `arguments`
// (its overrides, --log and all) from the checkpoint in `dir`: the same
// arguments with --resume DIR in place of any --resume they had, quoted for
// a POSIX shell where they need it.
std::string resume_command(const std::vector<std::string>& arguments, const std::string& dir);

}  // namespace tessera
