// Kernels written once over GCC's vector extensions (F4, F8, F16: 4, 8 and 16
// floats) and compiled per instruction set by target functions: the helpers
// they share and the choice of the widest set this CPU runs.
//
// e^a is 2^n e^r, |r| <= ln2 / 2, with a degree-6 fit of e^r made by
// scripts/erf_fit.py: within 1.2e-7 of e^a, relative, evaluated in f32. The
// fits are written as a * b + c and assume one FMA each: files that use them
// are built with -ffp-contract=fast, and -Wno-psabi as their vectors pass only
// between inlined functions (backends/CMakeLists.txt).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

namespace tessera {

// The instruction sets of the kernels: the widest this CPU runs is the
// default; tests run each one the CPU has.
enum class VectorIsa { scalar, avx2, avx512 };

inline bool vector_isa_runs(VectorIsa isa) {
  switch (isa) {
    case VectorIsa::scalar: return true;
    case VectorIsa::avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case VectorIsa::avx512: return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
  }
  return false;
}

inline VectorIsa widest_vector_isa() {
  static const VectorIsa widest = vector_isa_runs(VectorIsa::avx512) ? VectorIsa::avx512
                                  : vector_isa_runs(VectorIsa::avx2) ? VectorIsa::avx2
                                                                     : VectorIsa::scalar;
  return widest;
}

namespace vector_math {

using F4 = float __attribute__((vector_size(16)));  // SSE2, every x86-64
using F8 = float __attribute__((vector_size(32)));
using F16 = float __attribute__((vector_size(64)));

// scripts/erf_fit.py's output. exp: largest relative error in f32 1.2e-07
constexpr float kExpC[] = {0.49999994f, 0.16666521f, 0.04166839f, 0.00836871f, 0.00138146f};
constexpr float kExpLowest = -87.0f;  // e^-87 > 2^-126: 2^n stays a normal float
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2High = 0.693359375f, kLn2Low = -2.12194440e-4f;  // ln 2 = high + low, high exact in few bits
// Added and subtracted, rounds a float of magnitude below 2^22 to the nearest
// integer (ties to even), as the rounding instructions do.
constexpr float kRoundShifter = 12582912.0f;  // 1.5 * 2^23

template <class V>
constexpr std::int64_t kLanes = sizeof(V) / sizeof(float);

template <class V>
[[gnu::always_inline]] inline V splat(float c) {
  return V{} + c;
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
  std::int64_t i = 0;
  for (; i + kLanes<V> <= n; i += kLanes<V>) store(out + i, f(load<V>(in + i)...));
  if (i == n) return;
  const auto rest = static_cast<std::size_t>(n - i) * sizeof(float);
  const V v = f(load_first<V>(in + i, rest)...);
  std::memcpy(out + i, &v, rest);
}

}  // namespace vector_math
}  // namespace tessera
