// The cast kernel: CastElements (cast.hpp) over every element.
#include "backends/cuda/cast_kernels.hpp"

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/launch.hpp"

namespace tessera {
namespace {

__global__ void cast_kernel(const void* src, void* dst, CastElements cast, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) cast(src, dst, i);
}

}  // namespace

void cuda_cast(const void* src, void* dst, const CastElements& cast, std::int64_t n,
               cudaStream_t stream) {
  const LaunchConfig cfg = launch_config(n);
  if (cfg.blocks == 0) return;
  cast_kernel<<<cfg.blocks, cfg.threads, 0, stream>>>(src, dst, cast, n);
  cuda_check(cudaGetLastError(), "cast_kernel<<<blocks, 256, 0, stream>>>", __FILE__, __LINE__);
}

}  // namespace tessera
