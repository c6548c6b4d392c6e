// f32 to bf16 as to_bf16 (engine/core/dtype.hpp) rounds it: to nearest, ties
// to even, a NaN kept a (quiet) NaN; written without its early return, so
// that loops over it vectorise (with the branch they stayed scalar).
#pragma once

#include <bit>
#include <cstdint>

#include "engine/core/dtype.hpp"

namespace tessera {

inline bf16 bf16_rounded(float value) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, quiet_nan = (u >> 16) | 0x40u;
  return bf16{static_cast<std::uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded)};
}

}  // namespace tessera
