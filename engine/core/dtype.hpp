// Element types of tensors: f32, bf16 (storage; arithmetic in f32), i32, i64.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace tessera {

enum class DType : std::uint8_t { f32, bf16, i32, i64 };
inline constexpr int kDTypeCount = 4;

std::size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);
DType parse_dtype(std::string_view name);  // throws DTypeError listing the known names
bool is_floating(DType dtype);

// bfloat16 storage: the upper 16 bits of an IEEE f32.
struct bf16 {
  std::uint16_t bits = 0;
};

// Round-to-nearest-even, NaN stays NaN (quiet). Without a branch, so that
// loops over it vectorise (the CPU's casts and collectives, bf16_rounding.hpp).
inline bf16 to_bf16(float value) {
  std::uint32_t u;
  std::memcpy(&u, &value, sizeof u);
  const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, quiet_nan = (u >> 16) | 0x40u;
  return bf16{static_cast<std::uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded)};
}

inline float to_f32(bf16 value) {
  std::uint32_t u = static_cast<std::uint32_t>(value.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// The DType of a C++ element type, for typed access to tensor data.
template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<bf16>() { return DType::bf16; }
template <> constexpr DType dtype_of<std::int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<std::int64_t>() { return DType::i64; }

}  // namespace tessera
