// How far apart the cores of a two-thread run sit: the round trip of one
// cache line between two OpenMP threads, the threads the CPU kernels use.
//
// On the 2-vCPU VMs these benchmarks run on, the hypervisor places the two
// vCPUs sometimes on cores that share an L3 (a round trip of about 50 ns on
// a Zen 4) and sometimes on cores that do not (about 330 ns), and moves them
// between minutes. The FMA peak does not change, but memory-bound passes
// slow 2.4-2.9 times, even one whose two threads share no cache line (a Zen
// 5, 2026-12-02), and the zoo GPT's two-thread step took 108-113 ms near and
// 128-134 ms far (a Zen 4, 2026-12-01; bench/README.md). The benchmarks
// print this probe beside their two-thread rows so that a reader can tell
// the machine's placement from the engine's speed.
//
//   double ns = cache_line_round_trip_ns(2);  // 0 where OpenMP gave one thread
#pragma once

namespace tessera::bench {

// Median of three measurements of `trips` round trips each, in ns per round
// trip, between threads 0 and 1 of an OpenMP team of `threads` (the others
// wait). 0 when the team has fewer than two threads.
double cache_line_round_trip_ns(int threads, int trips = 20000);

// A round trip this long means the two threads share no cache: the lines
// cross between chiplets (or sockets). On the Zen 4 of 2026-12-01 this probe
// read 61-90 ns near and 306-328 ns far; on the Zen 5 of 2026-12-02 mostly
// 73-141 and 420-537.
inline constexpr double kFarRoundTripNs = 150;

// What a round trip says of the two threads: "near" (they share a cache),
// "far", or "-" where none was measured (0: one thread).
inline const char* core_placement(double round_trip_ns) {
  return round_trip_ns <= 0 ? "-" : round_trip_ns > kFarRoundTripNs ? "far" : "near";
}

}  // namespace tessera::bench
