// The cast kernel: CastElements (cast.hpp) over every element.
#include "backends/cuda/cast_kernels.hpp"

#include <cstdint>

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/launch.hpp"
#include "backends/cuda/quad_access.hpp"

namespace tessera {
namespace {

__global__ void cast_kernel(const void* src, void* dst, CastElements cast, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) cast(src, dst, i);
}

// Mixed precision's casts (f32 <-> bf16), four elements a thread
// (for_each_quad): one 16-byte access of floats and one 8-byte of bf16, the
// same conversions.
__global__ void f32_to_bf16_kernel(const float* src, std::uint16_t* dst, std::int64_t n) {
  for_each_quad(
      n, [&](std::int64_t q) { store_quad(dst, q, load_quad(src, q)); },
      [&](std::int64_t i) { dst[i] = cast_f32_to_bf16(src[i]); });
}

__global__ void bf16_to_f32_kernel(const std::uint16_t* src, float* dst, std::int64_t n) {
  for_each_quad(
      n, [&](std::int64_t q) { store_quad(dst, q, load_quad(src, q)); },
      [&](std::int64_t i) { dst[i] = cast_bf16_to_f32(src[i]); });
}

}  // namespace

void cuda_cast(const void* src, void* dst, const CastElements& cast, std::int64_t n,
               cudaStream_t stream) {
  if (n <= 0) return;
  const bool quads = aligned_for_quads(src, dst);
  const int quad_blocks = quad_launch_config(n).blocks;
  if (quads && cast.from == DType::f32 && cast.to == DType::bf16)
    f32_to_bf16_kernel<<<quad_blocks, kLaunchThreads, 0, stream>>>(static_cast<const float*>(src),
                                                                  static_cast<std::uint16_t*>(dst), n);
  else if (quads && cast.from == DType::bf16 && cast.to == DType::f32)
    bf16_to_f32_kernel<<<quad_blocks, kLaunchThreads, 0, stream>>>(static_cast<const std::uint16_t*>(src),
                                                                  static_cast<float*>(dst), n);
  else
    cast_kernel<<<launch_config(n).blocks, kLaunchThreads, 0, stream>>>(src, dst, cast, n);
  cuda_check(cudaGetLastError(), "cast_kernel<<<blocks, 256, 0, stream>>>", __FILE__, __LINE__);
}

}  // namespace tessera
