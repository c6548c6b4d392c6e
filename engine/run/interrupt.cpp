#include "engine/run/interrupt.hpp"

#include <atomic>

namespace tessera {
namespace {

// A signal handler may only use lock-free atomics and call async-signal-safe
// functions (sigaction is one): these atomics are the one piece of global
// mutable state of the program. g_caught is written by the handler alone;
// g_installed (a bit per index of kSignals) is set before any handler runs.
std::atomic<int> g_caught{0};
std::atomic<unsigned> g_installed{0};
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<unsigned>::is_always_lock_free);

constexpr auto& kSignals = InterruptCatcher::kSignals;

void on_signal(int signal) {
  struct sigaction fallback {};
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  int none = 0;
  if (!g_caught.compare_exchange_strong(none, signal)) {
    // A second signal, caught before the first's handler put the defaults
    // back (another thread took it meanwhile): it does what it would
    // uncaught, once this handler returns and unblocks it.
    sigaction(signal, &fallback, nullptr);
    raise(signal);
    return;
  }
  const unsigned installed = g_installed.load();
  for (std::size_t i = 0; i < kSignals.size(); ++i)
    if ((installed >> i) & 1u) sigaction(kSignals[i], &fallback, nullptr);  // an ignored one stays ignored
}

// Installs on_signal for kSignals[i] unless the process ignores it; `previous` keeps what was there.
void catch_signal(std::size_t i, struct sigaction* previous) {
  sigaction(kSignals[i], nullptr, previous);
  if (previous->sa_handler == SIG_IGN) return;
  g_installed.fetch_or(1u << i);
  struct sigaction action {};
  action.sa_handler = on_signal;
  // The others wait while the handler runs on this thread (another thread
  // may still take one: on_signal sees it is second).
  sigemptyset(&action.sa_mask);
  for (int other : kSignals) sigaddset(&action.sa_mask, other);
  action.sa_flags = SA_RESTART;  // a read or write the signal interrupts goes on
  sigaction(kSignals[i], &action, nullptr);
}

}  // namespace

InterruptCatcher::InterruptCatcher() {
  g_caught.store(0, std::memory_order_relaxed);
  g_installed.store(0);
  for (std::size_t i = 0; i < kSignals.size(); ++i) catch_signal(i, &previous_[i]);
}

InterruptCatcher::~InterruptCatcher() { release(); }

int InterruptCatcher::caught() const { return g_caught.load(std::memory_order_relaxed); }

int InterruptCatcher::caught_by_job(ProcessGroup& processes, std::chrono::milliseconds timeout) const {
  std::array<double, kSignals.size()> caught_by{};  // processes that caught each signal
  const int mine = caught();
  for (std::size_t i = 0; i < kSignals.size(); ++i) caught_by[i] = kSignals[i] == mine ? 1.0 : 0.0;
  processes.sum(caught_by, timeout);
  for (std::size_t i = 0; i < kSignals.size(); ++i)
    if (caught_by[i] > 0) return kSignals[i];
  return 0;
}

int InterruptCatcher::release() {
  if (!released_) {
    for (std::size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &previous_[i], nullptr);
    released_ = true;
  }
  return caught();
}

std::string signal_name(int signal) {
  switch (signal) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    default: return "signal " + std::to_string(signal);
  }
}

}  // namespace tessera
