// The FP32 FMA peak of this machine, measured: the yardstick every benchmark
// states its GEMM and step figures against (a data-sheet figure would not
// know the VM, the clock or the neighbours of this run).
//
// A probe of independent chains of packed FMAs in registers (AVX-512, else
// AVX2+FMA, else scalar, chosen at run time: the binary needs no
// -march=native), run on `threads` OpenMP threads at once.
//
//   Isa isa = detect_isa();
//   std::int64_t iters = calibrate_probe(isa, 0.3);           // ~0.3 s per measurement
//   PeakResult peak = measure_peak(isa, 2, iters, 5);         // best of 5, GFLOP/s on 2 threads
#pragma once

#include <cstdint>

namespace tessera::bench {

// Twelve independent chains: enough to cover FMA latency x throughput
// (4 cycles x 2 pipes = 8 in flight) on current x86 cores.
inline constexpr int kFmaChains = 12;

enum class Isa { avx512, avx2, scalar };
Isa detect_isa();
const char* isa_name(Isa isa);  // "AVX2+FMA (8 x f32)"

struct PeakResult {
  double gflops = 0;      // best over the repeats, all threads together
  int threads_seen = 0;   // threads OpenMP actually gave the probe
  double background = 0;  // other processes' CPU use meanwhile, in cores
};

// Runs the probe on `threads` OpenMP threads at once, `iters` loop trips each;
// the rate is all threads' flops over the wall time from the first thread's
// start to the last thread's end. Best of `repeats`.
PeakResult measure_peak(Isa isa, int threads, std::int64_t iters, int repeats);

// Loop trips for one probe measurement of about `target_s` seconds on one thread.
std::int64_t calibrate_probe(Isa isa, double target_s);

}  // namespace tessera::bench
