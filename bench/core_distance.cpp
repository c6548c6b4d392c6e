#include "bench/core_distance.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>

#include <omp.h>

namespace tessera::bench {
namespace {

// Thread 0 sets the line to 1 and waits for 0; thread 1 waits for 1 and sets
// 0. Each wait spins on the one line, so a round trip is two transfers of it.
// Thread 0 stops after `trips` or 0.2 s (two threads on one CPU hand over
// only when the scheduler preempts) and sets 2, which ends thread 1's loop.
double one_measurement(int threads, int trips) {
  // The line alone in its 64 bytes: a counter beside it would move too.
  struct alignas(64) Line {
    std::atomic<int> value{0};
  } line;
  static_assert(sizeof(Line) == 64);
  using Clock = std::chrono::steady_clock;
  double seconds = 0;
  int trips_done = 0, team = 1;
#pragma omp parallel num_threads(threads)
  {
#pragma omp single
    team = omp_get_num_threads();
    // single's barrier: every thread knows the team's size here.
    if (team >= 2 && omp_get_thread_num() == 0) {
      const auto start = Clock::now(), limit = start + std::chrono::milliseconds(200);
      int done = 0;
      while (done < trips && (done % 256 != 0 || Clock::now() < limit)) {
        line.value.store(1, std::memory_order_release);
        while (line.value.load(std::memory_order_acquire) != 0) {
        }
        ++done;
      }
      seconds = std::chrono::duration<double>(Clock::now() - start).count();
      trips_done = done;
      line.value.store(2, std::memory_order_release);
    } else if (team >= 2 && omp_get_thread_num() == 1) {
      for (int seen; (seen = line.value.load(std::memory_order_acquire)) != 2;)
        if (seen == 1) line.value.store(0, std::memory_order_release);
    }
  }
  return team >= 2 && trips_done > 0 ? seconds * 1e9 / trips_done : 0;
}

}  // namespace

double cache_line_round_trip_ns(int threads, int trips) {
  if (threads < 2 || trips <= 0) return 0;
  std::array<double, 3> ns{};
  for (double& m : ns) m = one_measurement(threads, trips);
  std::sort(ns.begin(), ns.end());
  return ns[1];
}

}  // namespace tessera::bench
