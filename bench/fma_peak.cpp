#include "bench/fma_peak.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include <immintrin.h>
#include <omp.h>

#include "bench/cpu_use.hpp"

namespace tessera::bench {
namespace {

using Clock = std::chrono::steady_clock;

volatile float g_sink = 0.0f;  // keeps every probe result alive

int isa_lanes(Isa isa) {
  switch (isa) {
    case Isa::avx512: return 16;
    case Isa::avx2: return 8;
    case Isa::scalar: return 1;
  }
  return 1;
}

// acc = acc * mul + add converges to add / (1 - mul): no overflow, no denormals.
// The result depends on every chain, so the loop cannot be removed.
__attribute__((target("avx512f"), noinline))
float fma_chains_avx512(std::int64_t iters, float seed) {
  const __m512 mul = _mm512_set1_ps(0.999999f);
  const __m512 add = _mm512_set1_ps(1e-6f * seed);
  __m512 acc[kFmaChains];
  for (int c = 0; c < kFmaChains; ++c) acc[c] = _mm512_set1_ps(seed + static_cast<float>(c));
  for (std::int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < kFmaChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], mul, add);
  }
  __m512 sum = acc[0];
  for (int c = 1; c < kFmaChains; ++c) sum = _mm512_add_ps(sum, acc[c]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  float total = 0.0f;
  for (float v : lanes) total += v;
  return total;
}

__attribute__((target("avx2,fma"), noinline))
float fma_chains_avx2(std::int64_t iters, float seed) {
  const __m256 mul = _mm256_set1_ps(0.999999f);
  const __m256 add = _mm256_set1_ps(1e-6f * seed);
  __m256 acc[kFmaChains];
  for (int c = 0; c < kFmaChains; ++c) acc[c] = _mm256_set1_ps(seed + static_cast<float>(c));
  for (std::int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < kFmaChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], mul, add);
  }
  __m256 sum = acc[0];
  for (int c = 1; c < kFmaChains; ++c) sum = _mm256_add_ps(sum, acc[c]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  float total = 0.0f;
  for (float v : lanes) total += v;
  return total;
}

__attribute__((noinline)) float fma_chains_scalar(std::int64_t iters, float seed) {
  float acc[kFmaChains];
  for (int c = 0; c < kFmaChains; ++c) acc[c] = seed + static_cast<float>(c);
  for (std::int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < kFmaChains; ++c) acc[c] = std::fma(acc[c], 0.999999f, 1e-6f * seed);
  }
  float total = 0.0f;
  for (float v : acc) total += v;
  return total;
}

float fma_chains(Isa isa, std::int64_t iters, float seed) {
  switch (isa) {
    case Isa::avx512: return fma_chains_avx512(iters, seed);
    case Isa::avx2: return fma_chains_avx2(iters, seed);
    case Isa::scalar: return fma_chains_scalar(iters, seed);
  }
  return 0.0f;
}

}  // namespace

Isa detect_isa() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return Isa::avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::avx2;
  return Isa::scalar;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::avx512: return "AVX-512 (16 x f32)";
    case Isa::avx2: return "AVX2+FMA (8 x f32)";
    case Isa::scalar: return "scalar";
  }
  return "?";
}

PeakResult measure_peak(Isa isa, int threads, std::int64_t iters, int repeats) {
  const double flops_per_iter = 2.0 * kFmaChains * isa_lanes(isa);
  PeakResult result;
  CpuUse load;
  for (int r = 0; r < repeats; ++r) {
    std::vector<Clock::time_point> start(static_cast<std::size_t>(threads)),
        end(static_cast<std::size_t>(threads));
    std::vector<float> out(static_cast<std::size_t>(threads), 0.0f);
    int seen = 0;
#pragma omp parallel num_threads(threads)
    {
      auto id = static_cast<std::size_t>(omp_get_thread_num());
#pragma omp single
      seen = omp_get_num_threads();
#pragma omp barrier
      start[id] = Clock::now();
      out[id] = fma_chains(isa, iters, 1.0f + static_cast<float>(id));
      end[id] = Clock::now();
    }
    for (float v : out) g_sink = g_sink + v;
    start.resize(static_cast<std::size_t>(seen));
    end.resize(static_cast<std::size_t>(seen));
    double wall = std::chrono::duration<double>(*std::max_element(end.begin(), end.end()) -
                                                *std::min_element(start.begin(), start.end()))
                      .count();
    double gflops = seen * static_cast<double>(iters) * flops_per_iter / wall / 1e9;
    result.gflops = std::max(result.gflops, gflops);
    result.threads_seen = seen;
  }
  result.background = load.others();
  return result;
}

std::int64_t calibrate_probe(Isa isa, double target_s) {
  std::int64_t iters = 1 << 16;
  for (;;) {
    auto start = Clock::now();
    g_sink = g_sink + fma_chains(isa, iters, 1.0f);
    double s = std::chrono::duration<double>(Clock::now() - start).count();
    if (s > 0.05)
      return std::max<std::int64_t>(
          1, static_cast<std::int64_t>(static_cast<double>(iters) * target_s / s));
    iters *= 4;
  }
}

}  // namespace tessera::bench
