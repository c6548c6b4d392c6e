// The loads and stores of the four-a-thread kernels (for_each_quad,
// launch.hpp): quad q of an array (elements 4q .. 4q + 3) as four floats in
// registers, from and to f32 in one 16-byte access, or from and to bf16 in
// one 8-byte access, rounded as cast.hpp rounds (the cast kernel, or a cast
// fused into another). The arrays must be aligned for it (aligned_for_quads).
#pragma once

#include <cstdint>

#include "backends/cuda/cast.hpp"

namespace tessera {

struct Floats4 {
  float v[4];
};

#if defined(__CUDACC__)
__device__ inline Floats4 load_quad(const float* p, std::int64_t q) {
  const float4 f = reinterpret_cast<const float4*>(p)[q];
  return {{f.x, f.y, f.z, f.w}};
}
__device__ inline Floats4 load_quad(const std::uint16_t* p, std::int64_t q) {  // bf16 bits, widened exactly
  const uint2 u = reinterpret_cast<const uint2*>(p)[q];
  return {{cast_bf16_to_f32(static_cast<std::uint16_t>(u.x & 0xffffu)), cast_bf16_to_f32(static_cast<std::uint16_t>(u.x >> 16)),
           cast_bf16_to_f32(static_cast<std::uint16_t>(u.y & 0xffffu)), cast_bf16_to_f32(static_cast<std::uint16_t>(u.y >> 16))}};
}
__device__ inline void store_quad(float* p, std::int64_t q, const Floats4& f) {
  reinterpret_cast<float4*>(p)[q] = make_float4(f.v[0], f.v[1], f.v[2], f.v[3]);
}
__device__ inline void store_quad(std::uint16_t* p, std::int64_t q, const Floats4& f) {
  const auto pair = [&](int k) {
    return static_cast<unsigned>(cast_f32_to_bf16(f.v[k])) | static_cast<unsigned>(cast_f32_to_bf16(f.v[k + 1])) << 16;
  };
  reinterpret_cast<uint2*>(p)[q] = make_uint2(pair(0), pair(2));
}
#endif

// One element, as a float or rounded to bf16 bits.
TESSERA_HOST_DEVICE inline void store_element(float* p, std::int64_t i, float v) { p[i] = v; }
TESSERA_HOST_DEVICE inline void store_element(std::uint16_t* p, std::int64_t i, float v) {
  p[i] = cast_f32_to_bf16(v);
}

}  // namespace tessera
