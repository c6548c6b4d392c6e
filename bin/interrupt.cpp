#include "bin/interrupt.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <string_view>

namespace tessera {
namespace {

// A signal handler may only store to a lock-free atomic and call
// async-signal-safe functions (sigaction is one): the atomic is the one piece
// of global mutable state of the program, written by the handler alone.
std::atomic<int> g_caught{0};
static_assert(std::atomic<int>::is_always_lock_free);

void on_signal(int signal) {
  int none = 0;
  g_caught.compare_exchange_strong(none, signal, std::memory_order_relaxed);  // the first one counts
  struct sigaction fallback {};
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  sigaction(SIGINT, &fallback, nullptr);
  sigaction(SIGTERM, &fallback, nullptr);
}

// Installs on_signal for `signal` unless the process ignores it; `previous` keeps what was there.
void catch_signal(int signal, struct sigaction* previous) {
  sigaction(signal, nullptr, previous);
  if (previous->sa_handler == SIG_IGN) return;
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a read or write the signal interrupts goes on
  sigaction(signal, &action, nullptr);
}

}  // namespace

InterruptCatcher::InterruptCatcher() {
  g_caught.store(0, std::memory_order_relaxed);
  catch_signal(SIGINT, &previous_int_);
  catch_signal(SIGTERM, &previous_term_);
}

InterruptCatcher::~InterruptCatcher() { release(); }

int InterruptCatcher::caught() const { return g_caught.load(std::memory_order_relaxed); }

int InterruptCatcher::release() {
  if (!released_) {
    sigaction(SIGINT, &previous_int_, nullptr);
    sigaction(SIGTERM, &previous_term_, nullptr);
    released_ = true;
  }
  return caught();
}

std::string resume_command(const std::vector<std::string>& arguments, const std::string& dir) {
  auto quoted = [](const std::string& word) {
    const bool plain = !word.empty() && std::all_of(word.begin(), word.end(), [](unsigned char c) {
      return std::isalnum(c) != 0 || std::string_view("_./:=,+-@%").find(static_cast<char>(c)) != std::string_view::npos;
    });
    if (plain) return word;
    std::string out = "'";
    for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
  };
  std::string command = "tessera";
  for (std::size_t i = 0; i < arguments.size(); ++i) {
    if (arguments[i] == "--resume") {
      ++i;  // and its value
      continue;
    }
    if (arguments[i].rfind("--resume=", 0) == 0) continue;
    command += " " + quoted(arguments[i]);
  }
  return command + " --resume " + quoted(dir);
}

}  // namespace tessera
