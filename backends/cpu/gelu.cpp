#include "backends/cpu/parallel_for.hpp"
#include "backends/cpu/gelu.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "backends/cpu/bf16_rounding.hpp"

namespace tessera {
namespace {

// scripts/erf_fit.py's output.
// erf: largest relative error in f32 3.7e-07 (exp's fit is in vector_math.hpp)
constexpr float kErfP[] = {1.1283791f, 0.2071261f, 0.051525004f, 0.0039906134f, 0.00014728779f, -1.9423248e-06f, 1.911098e-08f};
constexpr float kErfQ[] = {1.0f, 0.51689196f, 0.1179711f, 0.014958151f, 0.0010211237f};

constexpr float kErfLimit = 4.0f;  // erf(4) = 1 - 1.5e-8 rounds to 1
constexpr float kInvSqrt2 = 0.70710678118654752f, kInvSqrt2Pi = 0.39894228040143268f;

// Elements per task of the OpenMP loops: 16 KiB of floats.
constexpr std::int64_t kBlock = 4096;

// The kernels are written once over vector_math's vectors and compiled for 8
// lanes (AVX2 with FMA) and 16 (AVX-512) by the target functions at the end.
using vector_math::F16;
using vector_math::F8;
using vector_math::exp_fit;
using vector_math::for_vectors;
using vector_math::horner;
using vector_math::splat;

template <class V>
[[gnu::always_inline]] inline V clamp(V x, float lo, float hi) {
  x = x < lo ? splat<V>(lo) : x;
  return x > hi ? splat<V>(hi) : x;
}

template <class V>
[[gnu::always_inline]] inline V erf_fit(V x) {
  x = clamp(x, -kErfLimit, kErfLimit);
  const V t = x * x;
  return x * horner(kErfP, t) / horner(kErfQ, t);
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

// A block's GELU, then its rounding to bf16 from the L1 cache.
template <class V>
[[gnu::always_inline]] inline void gelu_block_to_bf16(const float* x, bf16* y, std::int64_t n) {
  float wide[kBlock];
  gelu_block<V>(x, wide, n);
  round_to_bf16_in_lanes<sizeof(V)>(wide, y, n);
}

[[gnu::target("avx2,fma")]] void gelu_block_to_bf16_avx2(const float* x, bf16* y, std::int64_t n) {
  gelu_block_to_bf16<F8>(x, y, n);
}

[[gnu::target("avx512f,fma")]] void gelu_block_to_bf16_avx512(const float* x, bf16* y, std::int64_t n) {
  gelu_block_to_bf16<F16>(x, y, n);
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
  parallel_for(blocks, true, [&](std::int64_t b) { body(b * kBlock, std::min(kBlock, n - b * kBlock)); });
}

// A kernel this CPU lacks would stop the process on its first instruction.
void check_runs(VectorIsa kernel) {
  if (!vector_isa_runs(kernel))
    throw std::invalid_argument("gelu: the " + std::string(kernel == VectorIsa::avx512 ? "AVX-512" : "AVX2") +
                                " kernel does not run on this CPU");
}

using ForwardBlock = void (*)(const float*, float*, std::int64_t);
ForwardBlock forward_block(VectorIsa kernel) {
  check_runs(kernel);
  return kernel == VectorIsa::avx512 ? gelu_block_avx512 : kernel == VectorIsa::avx2 ? gelu_block_avx2 : gelu_block_scalar;
}

}  // namespace

void gelu_erf(const float* x, float* y, std::int64_t n, VectorIsa kernel) {
  const ForwardBlock block = forward_block(kernel);
  over_blocks(n, [&](std::int64_t first, std::int64_t count) { block(x + first, y + first, count); });
}

void gelu_erf_to_bf16(const float* x, bf16* y, std::int64_t n, VectorIsa kernel) {
  const ForwardBlock forward = forward_block(kernel);
  // The vector kernels round in their own lanes; the C library's rounds after.
  const auto fused = kernel == VectorIsa::avx512 ? gelu_block_to_bf16_avx512
                     : kernel == VectorIsa::avx2 ? gelu_block_to_bf16_avx2
                                                  : nullptr;
  over_blocks(n, [&](std::int64_t first, std::int64_t count) {
    if (fused != nullptr) return fused(x + first, y + first, count);
    float wide[kBlock];
    forward(x + first, wide, count);
    round_to_bf16(wide, y + first, count);
  });
}

void gelu_erf_backward(const float* x, const float* dy, float* dx, std::int64_t n, VectorIsa kernel) {
  check_runs(kernel);
  const auto block = kernel == VectorIsa::avx512 ? gelu_backward_block_avx512
                     : kernel == VectorIsa::avx2 ? gelu_backward_block_avx2
                                                  : gelu_backward_block_scalar;
  over_blocks(n, [&](std::int64_t first, std::int64_t count) { block(x + first, dy + first, dx + first, count); });
}

}  // namespace tessera
