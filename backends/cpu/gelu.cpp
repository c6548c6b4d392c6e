#include "backends/cpu/gelu.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <utility>

namespace tessera {
namespace {

// scripts/erf_fit.py's output.
// erf: largest relative error in f32 3.7e-07
// exp: largest relative error in f32 1.2e-07
constexpr float kErfP[] = {1.1283791f, 0.2071261f, 0.051525004f, 0.0039906134f, 0.00014728779f, -1.9423248e-06f, 1.911098e-08f};
constexpr float kErfQ[] = {1.0f, 0.51689196f, 0.1179711f, 0.014958151f, 0.0010211237f};
constexpr float kExpC[] = {0.49999994f, 0.16666521f, 0.04166839f, 0.00836871f, 0.00138146f};

constexpr float kErfLimit = 4.0f;  // erf(4) = 1 - 1.5e-8 rounds to 1
constexpr float kExpLowest = -87.0f;  // e^-87 > 2^-126: 2^n stays a normal float
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2High = 0.693359375f, kLn2Low = -2.12194440e-4f;  // ln 2 = high + low, high exact in few bits
constexpr float kInvSqrt2 = 0.70710678118654752f, kInvSqrt2Pi = 0.39894228040143268f;

// Elements per task of the OpenMP loops: 16 KiB of floats.
constexpr std::int64_t kBlock = 4096;

// c[0] + c[1] t + ... + c[N - 1] t^(N - 1), unrolled.
template <std::size_t N, std::size_t... I>
[[gnu::target("avx2,fma")]] inline __m256 horner(const float (&c)[N], __m256 t, std::index_sequence<I...>) {
  __m256 acc = _mm256_set1_ps(c[N - 1]);
  ((acc = _mm256_fmadd_ps(acc, t, _mm256_set1_ps(c[N - 2 - I]))), ...);
  return acc;
}

template <std::size_t N>
[[gnu::target("avx2,fma")]] inline __m256 horner(const float (&c)[N], __m256 t) {
  return horner(c, t, std::make_index_sequence<N - 1>());
}

[[gnu::target("avx2,fma")]] inline __m256 erf8(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-kErfLimit)), _mm256_set1_ps(kErfLimit));
  const __m256 t = _mm256_mul_ps(x, x);
  return _mm256_div_ps(_mm256_mul_ps(x, horner(kErfP, t)), horner(kErfQ, t));
}

// e^a for a <= 0 (0 below kExpLowest).
[[gnu::target("avx2,fma")]] inline __m256 exp8(__m256 a) {
  const __m256 in_range = _mm256_cmp_ps(a, _mm256_set1_ps(kExpLowest), _CMP_GE_OQ);
  a = _mm256_max_ps(a, _mm256_set1_ps(kExpLowest));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(a, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2High), a);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Low), r);
  const __m256 e_r = _mm256_add_ps(_mm256_fmadd_ps(_mm256_mul_ps(r, r), horner(kExpC, r), r), _mm256_set1_ps(1.0f));
  const __m256i two_n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(_mm256_mul_ps(e_r, _mm256_castsi256_ps(two_n)), in_range);
}

// Φ(x) = 0.5 (1 + erf(x / √2)).
[[gnu::target("avx2,fma")]] inline __m256 cdf8(__m256 x) {
  const __m256 half = _mm256_set1_ps(0.5f);
  return _mm256_fmadd_ps(half, erf8(_mm256_mul_ps(x, _mm256_set1_ps(kInvSqrt2))), half);
}

// Lanes [0, count) of a vector, for the last elements of an array.
[[gnu::target("avx2,fma")]] inline __m256i first_lanes(std::int64_t count) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// The last n % 8 elements go through masked loads and stores, so every
// element is computed alike wherever it lies (a sharded tensor's rows equal
// the whole one's).
[[gnu::target("avx2,fma")]] void gelu_block_avx2(const float* x, float* y, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    _mm256_storeu_ps(y + i, _mm256_mul_ps(v, cdf8(v)));
  }
  if (i < n) {
    const __m256i mask = first_lanes(n - i);
    const __m256 v = _mm256_maskload_ps(x + i, mask);
    _mm256_maskstore_ps(y + i, mask, _mm256_mul_ps(v, cdf8(v)));
  }
}

// gelu'(x) = Φ(x) + x φ(x), φ(x) = e^(-x²/2) / √(2π).
[[gnu::target("avx2,fma")]] inline __m256 gelu_derivative8(__m256 x) {
  const __m256 pdf = _mm256_mul_ps(_mm256_set1_ps(kInvSqrt2Pi), exp8(_mm256_mul_ps(_mm256_set1_ps(-0.5f), _mm256_mul_ps(x, x))));
  return _mm256_fmadd_ps(x, pdf, cdf8(x));
}

[[gnu::target("avx2,fma")]] void gelu_backward_block_avx2(const float* x, const float* dy, float* dx, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dx + i, _mm256_mul_ps(_mm256_loadu_ps(dy + i), gelu_derivative8(_mm256_loadu_ps(x + i))));
  if (i < n) {
    const __m256i mask = first_lanes(n - i);
    const __m256 d = gelu_derivative8(_mm256_maskload_ps(x + i, mask));
    _mm256_maskstore_ps(dx + i, mask, _mm256_mul_ps(_mm256_maskload_ps(dy + i, mask), d));
  }
}

void gelu_block_scalar(const float* x, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * kInvSqrt2));
}

void gelu_backward_block_scalar(const float* x, const float* dy, float* dx, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    dx[i] = dy[i] * (0.5f * (1.0f + std::erf(v * kInvSqrt2)) + v * kInvSqrt2Pi * std::exp(-0.5f * v * v));
  }
}

// body(first, count) over blocks of [0, n), spread over the OpenMP team. The
// bodies call the target functions rather than being them: Clang gives no
// target attribute to the function it outlines a parallel region into.
template <class Body>
void over_blocks(std::int64_t n, Body body) {
  const std::int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (std::int64_t b = 0; b < blocks; ++b) body(b * kBlock, std::min(kBlock, n - b * kBlock));
}

}  // namespace

bool gelu_vectorized() {
  static const bool vectorized = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return vectorized;
}

void gelu_erf(const float* x, float* y, std::int64_t n) {
  const bool vectorized = gelu_vectorized();
  over_blocks(n, [&](std::int64_t first, std::int64_t count) {
    (vectorized ? gelu_block_avx2 : gelu_block_scalar)(x + first, y + first, count);
  });
}

void gelu_erf_backward(const float* x, const float* dy, float* dx, std::int64_t n) {
  const bool vectorized = gelu_vectorized();
  over_blocks(n, [&](std::int64_t first, std::int64_t count) {
    (vectorized ? gelu_backward_block_avx2 : gelu_backward_block_scalar)(x + first, dy + first, dx + first, count);
  });
}

}  // namespace tessera
