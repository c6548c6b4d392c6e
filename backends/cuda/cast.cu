// The cast kernel: CastElements (cast.hpp) over every element.
#include "backends/cuda/cast_kernels.hpp"

#include <cstdint>

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/launch.hpp"

namespace tessera {
namespace {

__global__ void cast_kernel(const void* src, void* dst, CastElements cast, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) cast(src, dst, i);
}

// Mixed precision's casts (f32 <-> bf16), four elements a thread: one 16-byte
// load or store of floats and one 8-byte of bf16, the same conversions.
__global__ void f32_to_bf16_by_4(const float4* src, uint2* dst, std::int64_t quads) {
  for (std::int64_t q = first_index(); q < quads; q += grid_stride()) {
    const float4 v = src[q];
    dst[q] = make_uint2(cast_f32_to_bf16(v.x) | static_cast<unsigned>(cast_f32_to_bf16(v.y)) << 16,
                        cast_f32_to_bf16(v.z) | static_cast<unsigned>(cast_f32_to_bf16(v.w)) << 16);
  }
}

__global__ void bf16_to_f32_by_4(const uint2* src, float4* dst, std::int64_t quads) {
  for (std::int64_t q = first_index(); q < quads; q += grid_stride()) {
    const uint2 v = src[q];
    dst[q] = make_float4(cast_bf16_to_f32(static_cast<std::uint16_t>(v.x & 0xffffu)),
                         cast_bf16_to_f32(static_cast<std::uint16_t>(v.x >> 16)),
                         cast_bf16_to_f32(static_cast<std::uint16_t>(v.y & 0xffffu)),
                         cast_bf16_to_f32(static_cast<std::uint16_t>(v.y >> 16)));
  }
}

bool aligned(const void* p, std::uintptr_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

}  // namespace

void cuda_cast(const void* src, void* dst, const CastElements& cast, std::int64_t n,
               cudaStream_t stream) {
  const LaunchConfig cfg = launch_config(n);
  if (cfg.blocks == 0) return;
  const bool by_4 = n % 4 == 0 && aligned(src, 16) && aligned(dst, 16);
  if (by_4 && cast.from == DType::f32 && cast.to == DType::bf16) {
    const LaunchConfig quads = launch_config(n / 4);
    f32_to_bf16_by_4<<<quads.blocks, quads.threads, 0, stream>>>(static_cast<const float4*>(src),
                                                                 static_cast<uint2*>(dst), n / 4);
  } else if (by_4 && cast.from == DType::bf16 && cast.to == DType::f32) {
    const LaunchConfig quads = launch_config(n / 4);
    bf16_to_f32_by_4<<<quads.blocks, quads.threads, 0, stream>>>(static_cast<const uint2*>(src),
                                                                 static_cast<float4*>(dst), n / 4);
  } else {
    cast_kernel<<<cfg.blocks, cfg.threads, 0, stream>>>(src, dst, cast, n);
  }
  cuda_check(cudaGetLastError(), "cast_kernel<<<blocks, 256, 0, stream>>>", __FILE__, __LINE__);
}

}  // namespace tessera
