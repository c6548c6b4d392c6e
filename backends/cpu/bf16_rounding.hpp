// f32 to bf16 as to_bf16 (engine/core/dtype.hpp) rounds it: to nearest, ties
// to even, a NaN kept a (quiet) NaN. A whole array in the widest vectors this
// CPU has; and the same over GCC vector lanes, for kernels that round what
// they computed while it is in cache (inlined into their target functions).
#pragma once

#include <cstdint>
#include <cstring>

#include "engine/core/dtype.hpp"

namespace tessera {

// to[i] = to_bf16(from[i]) for i < n, on the calling thread, in AVX-512 or
// AVX2 vectors where the CPU has them. Through to_bf16's loop, compiled
// without a target (SSE), 1M elements took 0.29 ms on one thread of a Zen 5
// (2026-11-29); in AVX-512, 0.061.
void round_to_bf16(const float* from, bf16* to, std::int64_t n);

template <int kBytes>
struct IntegerLanes {  // in a struct: GCC makes no vector type of a dependent size in a `using`
  typedef std::uint32_t bits __attribute__((vector_size(kBytes)));
  typedef std::uint16_t half __attribute__((vector_size(kBytes / 2)));
};

// round_to_bf16 in vectors of kBytes: to_bf16's arithmetic on the lanes' bits
// as 32-bit integers, narrowed to 16 (vpmovdw on AVX-512).
template <int kBytes>
[[gnu::always_inline]] inline void round_to_bf16_in_lanes(const float* from, bf16* to, std::int64_t n) {
  using Bits = typename IntegerLanes<kBytes>::bits;
  using Half = typename IntegerLanes<kBytes>::half;
  constexpr std::int64_t lanes = kBytes / 4;
  std::int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    Bits u;
    std::memcpy(&u, from + i, sizeof u);
    const Bits rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, quiet_nan = (u >> 16) | 0x40u;
    const Bits chosen = (u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded;
    const Half bits = __builtin_convertvector(chosen, Half);
    std::memcpy(static_cast<void*>(to + i), &bits, sizeof bits);
  }
  for (; i < n; ++i) to[i] = to_bf16(from[i]);
}

}  // namespace tessera
