// Philox-4x32-10 counter-based random numbers (Salmon et al., SC'11), the
// generator of cuRAND and JAX. Element i of a fill with (seed, offset) is a pure
// function of (seed, offset + i): reproducible, independent of how the work is
// split over threads, and identical on the CPU and the GPU (host/device code).
#pragma once

#include <cmath>
#include <cstdint>

#include "backends/host_device.hpp"

namespace tessera::philox {

struct Block {
  std::uint32_t v[4];
};

TESSERA_HOST_DEVICE inline std::uint32_t mulhilo(std::uint32_t a, std::uint32_t b,
                                                 std::uint32_t& hi) {
  std::uint64_t p = static_cast<std::uint64_t>(a) * b;
  hi = static_cast<std::uint32_t>(p >> 32);
  return static_cast<std::uint32_t>(p);
}

// Ten rounds of Philox-4x32 on `counter` under the 64-bit `key`.
TESSERA_HOST_DEVICE inline Block philox4x32(std::uint64_t counter_lo, std::uint64_t counter_hi,
                                            std::uint64_t key) {
  std::uint32_t c0 = static_cast<std::uint32_t>(counter_lo), c1 = static_cast<std::uint32_t>(counter_lo >> 32);
  std::uint32_t c2 = static_cast<std::uint32_t>(counter_hi), c3 = static_cast<std::uint32_t>(counter_hi >> 32);
  std::uint32_t k0 = static_cast<std::uint32_t>(key), k1 = static_cast<std::uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    std::uint32_t hi0, hi1;
    std::uint32_t lo0 = mulhilo(0xD2511F53u, c0, hi0);
    std::uint32_t lo1 = mulhilo(0xCD9E8D57u, c2, hi1);
    std::uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return Block{{c0, c1, c2, c3}};
}

// 32 random bits for stream position `index` (four positions share one block).
TESSERA_HOST_DEVICE inline std::uint32_t bits(std::uint64_t seed, std::uint64_t index) {
  return philox4x32(index / 4, 0, seed).v[index % 4];
}

// Uniform in [0, 1) with 24 bits of mantissa.
TESSERA_HOST_DEVICE inline float uniform01(std::uint32_t bits) {
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}

// Standard normal for stream position `index`, by Box-Muller over the block's
// first two words (positions map one-to-one to blocks here, so a normal fill
// uses counter i for element i).
TESSERA_HOST_DEVICE inline float normal(std::uint64_t seed, std::uint64_t index) {
  Block b = philox4x32(index, 1, seed);  // counter_hi 1: a stream apart from bits()
  float u1 = (static_cast<float>(b.v[0] >> 8) + 1.0f) * (1.0f / 16777216.0f);  // (0, 1]
  float u2 = uniform01(b.v[1]);
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853071795864f * u2);
}

}  // namespace tessera::philox
