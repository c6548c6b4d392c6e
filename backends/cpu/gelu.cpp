#include "backends/cpu/gelu.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>
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
// Added and subtracted, rounds a float of magnitude below 2^22 to the nearest
// integer (ties to even), as the rounding instructions do.
constexpr float kRoundShifter = 12582912.0f;  // 1.5 * 2^23

// Elements per task of the OpenMP loops: 16 KiB of floats.
constexpr std::int64_t kBlock = 4096;

// The kernels are written once over GCC's vector extensions, and compiled for
// 8 lanes (AVX2 with FMA) and 16 (AVX-512) by the target functions at the end.
// The file is built with -ffp-contract=fast (backends/CMakeLists.txt), so
// a * b + c is one FMA, as the fits assume.
using F8 = float __attribute__((vector_size(32)));
using F16 = float __attribute__((vector_size(64)));

template <class V>
[[gnu::always_inline]] inline V splat(float c) {
  return V{} + c;
}

template <class V>
[[gnu::always_inline]] inline V clamp(V x, float lo, float hi) {
  x = x < lo ? splat<V>(lo) : x;
  return x > hi ? splat<V>(hi) : x;
}

// c[0] + c[1] t + ... + c[N - 1] t^(N - 1), unrolled.
template <class V, std::size_t N, std::size_t... I>
[[gnu::always_inline]] inline V horner(const float (&c)[N], V t, std::index_sequence<I...>) {
  V acc = splat<V>(c[N - 1]);
  ((acc = acc * t + c[N - 2 - I]), ...);
  return acc;
}

template <class V, std::size_t N>
[[gnu::always_inline]] inline V horner(const float (&c)[N], V t) {
  return horner(c, t, std::make_index_sequence<N - 1>());
}

template <class V>
[[gnu::always_inline]] inline V erf_fit(V x) {
  x = clamp(x, -kErfLimit, kErfLimit);
  const V t = x * x;
  return x * horner(kErfP, t) / horner(kErfQ, t);
}

// e^a for a <= 0 (0 below kExpLowest, and for NaN: the callers' other
// factors carry a NaN on).
template <class V>
[[gnu::always_inline]] inline V exp_fit(V a) {
  using Int = decltype(a < a);  // the same lanes as 32-bit integers
  const Int in_range = a >= kExpLowest;
  a = in_range ? a : splat<V>(kExpLowest);  // NaN too: its conversion to an integer would be undefined
  const V n = (a * kLog2e + kRoundShifter) - kRoundShifter;
  V r = a - n * kLn2High;
  r = r - n * kLn2Low;
  const V e_r = r * r * horner(kExpC, r) + r + 1.0f;
  const Int two_n = (__builtin_convertvector(n, Int) + 127) << 23;
  return std::bit_cast<V>(std::bit_cast<Int>(e_r * std::bit_cast<V>(two_n)) & in_range);
}

// Φ(x) = 0.5 (1 + erf(x / √2)).
template <class V>
[[gnu::always_inline]] inline V cdf(V x) {
  return 0.5f * erf_fit(x * kInvSqrt2) + 0.5f;
}

// gelu'(x) = Φ(x) + x φ(x), φ(x) = e^(-x²/2) / √(2π).
template <class V>
[[gnu::always_inline]] inline V gelu_derivative(V x) {
  return x * (kInvSqrt2Pi * exp_fit(-0.5f * (x * x))) + cdf(x);
}

template <class V>
[[gnu::always_inline]] inline V load(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <class V>
[[gnu::always_inline]] inline void store(float* p, V v) {
  std::memcpy(p, &v, sizeof v);
}

// The first `bytes` of p in a vector, the rest of it zero.
template <class V>
[[gnu::always_inline]] inline V load_first(const float* p, std::size_t bytes) {
  V v{};
  std::memcpy(&v, p, bytes);
  return v;
}

// out = f(the same vectors of the inputs), vector by vector over [0, n). The
// last n % lanes elements go through a padded vector, so every element is
// computed alike wherever it lies (a sharded tensor's rows equal the whole
// one's). out may be any of the inputs.
template <class V, class F, class... In>
[[gnu::always_inline]] inline void for_vectors(std::int64_t n, F f, float* out, const In*... in) {
  constexpr std::int64_t lanes = sizeof(V) / sizeof(float);
  std::int64_t i = 0;
  for (; i + lanes <= n; i += lanes) store(out + i, f(load<V>(in + i)...));
  if (i == n) return;
  const auto rest = static_cast<std::size_t>(n - i) * sizeof(float);
  const V v = f(load_first<V>(in + i, rest)...);
  std::memcpy(out + i, &v, rest);
}

// The functions for_vectors applies; functors rather than lambdas, so that
// they inline into the target functions below.
struct Gelu {
  template <class V>
  [[gnu::always_inline]] V operator()(V x) const {
    return x * cdf(x);
  }
};

struct GeluBackward {
  template <class V>
  [[gnu::always_inline]] V operator()(V x, V dy) const {
    return dy * gelu_derivative(x);
  }
};

template <class V>
[[gnu::always_inline]] inline void gelu_block(const float* x, float* y, std::int64_t n) {
  for_vectors<V>(n, Gelu{}, y, x);
}

template <class V>
[[gnu::always_inline]] inline void gelu_backward_block(const float* x, const float* dy, float* dx, std::int64_t n) {
  for_vectors<V>(n, GeluBackward{}, dx, x, dy);
}

[[gnu::target("avx2,fma")]] void gelu_block_avx2(const float* x, float* y, std::int64_t n) {
  gelu_block<F8>(x, y, n);
}

[[gnu::target("avx2,fma")]] void gelu_backward_block_avx2(const float* x, const float* dy, float* dx, std::int64_t n) {
  gelu_backward_block<F8>(x, dy, dx, n);
}

[[gnu::target("avx512f,fma")]] void gelu_block_avx512(const float* x, float* y, std::int64_t n) {
  gelu_block<F16>(x, y, n);
}

[[gnu::target("avx512f,fma")]] void gelu_backward_block_avx512(const float* x, const float* dy, float* dx,
                                                               std::int64_t n) {
  gelu_backward_block<F16>(x, dy, dx, n);
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

// A kernel this CPU lacks would stop the process on its first instruction.
void check_runs(GeluKernel kernel) {
  if (!gelu_kernel_runs(kernel))
    throw std::invalid_argument("gelu: the " + std::string(kernel == GeluKernel::avx512 ? "AVX-512" : "AVX2") +
                                " kernel does not run on this CPU");
}

}  // namespace

bool gelu_kernel_runs(GeluKernel kernel) {
  switch (kernel) {
    case GeluKernel::scalar: return true;
    case GeluKernel::avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case GeluKernel::avx512: return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
  }
  return false;
}

GeluKernel gelu_kernel() {
  static const GeluKernel widest = gelu_kernel_runs(GeluKernel::avx512) ? GeluKernel::avx512
                                   : gelu_kernel_runs(GeluKernel::avx2) ? GeluKernel::avx2
                                                                         : GeluKernel::scalar;
  return widest;
}

void gelu_erf(const float* x, float* y, std::int64_t n, GeluKernel kernel) {
  check_runs(kernel);
  const auto block = kernel == GeluKernel::avx512 ? gelu_block_avx512
                     : kernel == GeluKernel::avx2 ? gelu_block_avx2
                                                  : gelu_block_scalar;
  over_blocks(n, [&](std::int64_t first, std::int64_t count) { block(x + first, y + first, count); });
}

void gelu_erf_backward(const float* x, const float* dy, float* dx, std::int64_t n, GeluKernel kernel) {
  check_runs(kernel);
  const auto block = kernel == GeluKernel::avx512 ? gelu_backward_block_avx512
                     : kernel == GeluKernel::avx2 ? gelu_backward_block_avx2
                                                  : gelu_backward_block_scalar;
  over_blocks(n, [&](std::int64_t first, std::int64_t count) { block(x + first, dy + first, dx + first, count); });
}

}  // namespace tessera
