// Launch configuration of the CUDA backend's grid-stride kernels.
//
// Every elementwise kernel runs
//   for (i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
// so any grid covers every element exactly once; the grid only decides how
// many threads share the work. One thread per element up to a cap on the
// blocks (past it, threads loop), and indices in std::int64_t so tensors of
// 2^31 elements and more do not overflow. Plain C++: tests check it on the host.
#pragma once

#include <cstdint>

namespace tessera {

struct LaunchConfig {
  int blocks = 0;  // 0: nothing to do, do not launch (a grid of 0 blocks is a launch error)
  int threads = 0;
};

inline constexpr int kLaunchThreads = 256;
// Enough blocks to fill any current GPU many times over; also the limit of
// gridDim.y/z, so the cap holds whichever dimension a kernel uses.
inline constexpr int kLaunchMaxBlocks = 65535;

// blocks = min(ceil(elements / threads), max_blocks), at least 1 when elements >= 1.
inline LaunchConfig launch_config(std::int64_t elements, int max_blocks = kLaunchMaxBlocks) {
  if (elements <= 0 || max_blocks <= 0) return {0, kLaunchThreads};
  const std::int64_t wanted =  // ceil without overflow near INT64_MAX
      elements / kLaunchThreads + (elements % kLaunchThreads != 0 ? 1 : 0);
  const std::int64_t blocks = wanted < max_blocks ? wanted : max_blocks;
  return {static_cast<int>(blocks), kLaunchThreads};
}

#if defined(__CUDACC__)
// The start and the step of the grid-stride loop, in 64-bit indices.
__device__ inline std::int64_t first_index() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline std::int64_t grid_stride() {
  return static_cast<std::int64_t>(blockDim.x) * gridDim.x;
}
#endif

}  // namespace tessera
