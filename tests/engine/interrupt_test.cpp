// InterruptCatcher (engine/run/interrupt.hpp): the first of SIGINT, SIGTERM
// and SIGUSR1 is caught and puts the handlers it installed back to their
// defaults; a signal ignored from the start stays ignored; release() puts
// back what was there; caught_by_job gives every process of a job the same
// answer. (A fit stopped by FitCallbacks::interrupted: checkpoint_test.cpp;
// signals to `tessera train` and to a job of several processes: tests/cli/.)
#include <doctest/doctest.h>

#include <chrono>
#include <csignal>
#include <stdexcept>

#include "engine/run/interrupt.hpp"

using namespace tessera;

namespace {

using Handler = void (*)(int);

Handler handler_of(int signal) {
  struct sigaction action {};
  sigaction(signal, nullptr, &action);
  return action.sa_handler;
}
// (doctest prints no function pointers: the comparison as a bool.)
bool handled_by(int signal, Handler handler) { return handler_of(signal) == handler; }

// A job of two processes, this one and another that caught `theirs` (0: none).
class TwoProcesses final : public ProcessGroup {
 public:
  explicit TwoProcesses(int theirs) : theirs_(theirs) {}
  ProcessPlacement placement() const override { return {.process = 0, .processes = 2}; }
  void sum(std::span<double> values, std::chrono::milliseconds) override {
    for (std::size_t i = 0; i < values.size(); ++i) values[i] += InterruptCatcher::kSignals[i] == theirs_ ? 1.0 : 0.0;
  }
  void merge(std::span<std::byte>, std::chrono::milliseconds) override { unused(); }
  void barrier(std::chrono::milliseconds) override { unused(); }
  void broadcast_from_first(std::span<std::byte>, std::chrono::milliseconds) override { unused(); }

 private:
  [[noreturn]] static void unused() { throw std::logic_error("caught_by_job needs sum() alone"); }
  int theirs_;
};

constexpr std::chrono::milliseconds kTimeout{1000};

}  // namespace

TEST_CASE("interrupt: the first signal is caught, the handlers go back to their defaults, and release restores them") {
  const Handler before_int = handler_of(SIGINT), before_term = handler_of(SIGTERM), before_usr1 = handler_of(SIGUSR1);
  InterruptCatcher signals;
  CHECK(signals.caught() == 0);
  for (int s : InterruptCatcher::kSignals) CHECK_FALSE(handled_by(s, SIG_DFL));
  std::raise(SIGUSR1);
  CHECK(signals.caught() == SIGUSR1);
  for (int s : InterruptCatcher::kSignals) CHECK(handled_by(s, SIG_DFL));  // a second one ends the process
  CHECK(signals.release() == SIGUSR1);
  CHECK(handled_by(SIGINT, before_int));
  CHECK(handled_by(SIGTERM, before_term));
  CHECK(handled_by(SIGUSR1, before_usr1));
}

TEST_CASE("interrupt: a signal ignored from the start stays ignored, also once another is caught") {
  struct sigaction ignore {}, before {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGTERM, &ignore, &before);
  {
    InterruptCatcher signals;
    CHECK(handled_by(SIGTERM, SIG_IGN));
    std::raise(SIGTERM);  // ignored: nothing caught
    CHECK(signals.caught() == 0);
    std::raise(SIGUSR1);
    CHECK(signals.caught() == SIGUSR1);
    CHECK(handled_by(SIGTERM, SIG_IGN));
    CHECK(handled_by(SIGINT, SIG_DFL));
  }
  CHECK(handled_by(SIGTERM, SIG_IGN));
  sigaction(SIGTERM, &before, nullptr);
}

TEST_CASE("interrupt: caught_by_job gives every process of a job the first signal any of them caught") {
  InterruptCatcher signals;
  TwoProcesses quiet(0), terminated(SIGTERM);
  CHECK(signals.caught_by_job(quiet, kTimeout) == 0);
  CHECK(signals.caught_by_job(terminated, kTimeout) == SIGTERM);  // this process caught nothing
  std::raise(SIGUSR1);
  CHECK(signals.caught_by_job(quiet, kTimeout) == SIGUSR1);
  // Both processes get SIGTERM, the first of kSignals either caught: the same exit code.
  CHECK(signals.caught_by_job(terminated, kTimeout) == SIGTERM);
}
