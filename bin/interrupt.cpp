#include "bin/interrupt.hpp"

#include <atomic>
#include <csignal>

namespace tessera {
namespace {

// A signal handler may only store to a lock-free atomic: the one piece of
// global mutable state of the program, written by the handler alone.
std::atomic<int> g_caught{0};
static_assert(std::atomic<int>::is_always_lock_free);

void on_signal(int signal) { g_caught.store(signal, std::memory_order_relaxed); }

}  // namespace

InterruptCatcher::InterruptCatcher() {
  g_caught.store(0, std::memory_order_relaxed);
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND | SA_RESTART;  // the second signal takes the default action: the end
  sigaction(SIGINT, &action, &previous_int_);
  sigaction(SIGTERM, &action, &previous_term_);
}

InterruptCatcher::~InterruptCatcher() {
  sigaction(SIGINT, &previous_int_, nullptr);
  sigaction(SIGTERM, &previous_term_, nullptr);
}

int InterruptCatcher::caught() const { return g_caught.load(std::memory_order_relaxed); }

}  // namespace tessera
