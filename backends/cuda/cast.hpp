// cast between f32, bf16, i32 and i64 as one host/device element function:
// cast.cu launches it, and tests run it on the host against the CPU backend's
// cast (backends/cpu/layout_ops.cpp), whose conversions it repeats bit for
// bit: f32 -> bf16 rounds to nearest even and keeps NaN a quiet NaN (to_bf16 of
// engine/core/dtype.hpp); integers -> bf16 round once (to odd into f32, then to
// nearest even); integers -> f32 round to nearest even; floats -> integers
// truncate toward zero, saturate at the integer's range and send NaN to 0
// (float_to_integer.hpp, shared with the CPU); i64 -> i32 wraps.
#pragma once

#include <cstdint>
#include <cstring>

#include "backends/float_to_integer.hpp"
#include "backends/host_device.hpp"
#include "engine/core/dtype.hpp"

namespace tessera {

TESSERA_HOST_DEVICE inline std::uint32_t cast_float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

TESSERA_HOST_DEVICE inline float cast_bits_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// engine/core/dtype.hpp's to_bf16 / to_f32, on bits.
TESSERA_HOST_DEVICE inline std::uint16_t cast_f32_to_bf16(float value) {
  std::uint32_t u = cast_float_bits(value);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

TESSERA_HOST_DEVICE inline float cast_bf16_to_f32(std::uint16_t bits) {
  return cast_bits_float(static_cast<std::uint32_t>(bits) << 16);
}

// The CPU's integer_to_bf16: keep the top 24 significant bits (exact in f32),
// set the last bit when anything was dropped (round to odd), scale back (by a
// power of two: exact), then round to nearest even once.
TESSERA_HOST_DEVICE inline std::uint16_t cast_integer_to_bf16(std::int64_t v) {
  const std::uint64_t magnitude =
      v < 0 ? 0 - static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v);
#if defined(__CUDA_ARCH__)
  const int width = 64 - __clzll(static_cast<long long>(magnitude));
#else
  const int width = magnitude == 0 ? 0 : 64 - __builtin_clzll(magnitude);
#endif
  const int dropped = width > 24 ? width - 24 : 0;
  const std::uint64_t kept = magnitude >> dropped;
  float f = static_cast<float>(kept);
  if ((kept << dropped) != magnitude) f = cast_bits_float(cast_float_bits(f) | 1u);
  f *= static_cast<float>(std::uint64_t{1} << dropped);
  return cast_f32_to_bf16(v < 0 ? -f : f);
}

struct CastElements {
  DType from = DType::f32, to = DType::f32;

  TESSERA_HOST_DEVICE float load_f32(const void* src, std::int64_t i) const {
    switch (from) {
      case DType::f32: return static_cast<const float*>(src)[i];
      case DType::bf16: return cast_bf16_to_f32(static_cast<const std::uint16_t*>(src)[i]);
      case DType::i32: return static_cast<float>(static_cast<const std::int32_t*>(src)[i]);
      case DType::i64: return static_cast<float>(static_cast<const std::int64_t*>(src)[i]);
    }
    return 0.0f;
  }
  TESSERA_HOST_DEVICE std::uint16_t load_bf16(const void* src, std::int64_t i) const {
    switch (from) {
      case DType::f32: return cast_f32_to_bf16(static_cast<const float*>(src)[i]);
      case DType::bf16: return static_cast<const std::uint16_t*>(src)[i];
      case DType::i32: return cast_integer_to_bf16(static_cast<const std::int32_t*>(src)[i]);
      case DType::i64: return cast_integer_to_bf16(static_cast<const std::int64_t*>(src)[i]);
    }
    return 0;
  }
  TESSERA_HOST_DEVICE std::int64_t load_i64(const void* src, std::int64_t i) const {
    switch (from) {
      case DType::f32: return float_to_i64(static_cast<const float*>(src)[i]);
      case DType::bf16: return float_to_i64(cast_bf16_to_f32(static_cast<const std::uint16_t*>(src)[i]));
      case DType::i32: return static_cast<const std::int32_t*>(src)[i];
      case DType::i64: return static_cast<const std::int64_t*>(src)[i];
    }
    return 0;
  }

  // dst[i] = src[i] converted.
  TESSERA_HOST_DEVICE void operator()(const void* src, void* dst, std::int64_t i) const {
    switch (to) {
      case DType::f32: static_cast<float*>(dst)[i] = load_f32(src, i); break;
      case DType::bf16: static_cast<std::uint16_t*>(dst)[i] = load_bf16(src, i); break;
      case DType::i32:  // floats saturate; i64 wraps
        static_cast<std::int32_t*>(dst)[i] = from == DType::f32 || from == DType::bf16
                                                 ? float_to_i32(load_f32(src, i))
                                                 : static_cast<std::int32_t>(load_i64(src, i));
        break;
      case DType::i64: static_cast<std::int64_t*>(dst)[i] = load_i64(src, i); break;
    }
  }
};

}  // namespace tessera
