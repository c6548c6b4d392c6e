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

// Memory-bound kernels load and store four floats at a time (one 16-byte
// access instead of four) where every pointer they touch is 16-byte aligned:
// the arena's buffers are, a view that starts mid-buffer may not be.
template <typename... Pointers>
bool aligned_for_quads(const Pointers*... pointers) {
  return ((reinterpret_cast<std::uintptr_t>(pointers) % 16 == 0) && ...);
}

// The grid of a kernel that takes four elements a thread (for_each_quad).
inline LaunchConfig quad_launch_config(std::int64_t elements) {
  return launch_config(elements / 4 + (elements % 4 != 0 ? 1 : 0));
}

#if defined(__CUDACC__)
// The start and the step of the grid-stride loop, in 64-bit indices.
__device__ inline std::int64_t first_index() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline std::int64_t grid_stride() {
  return static_cast<std::int64_t>(blockDim.x) * gridDim.x;
}

// quad(q) for the count / 4 whole quads (elements 4q .. 4q + 3), grid-stride,
// then single(i) for the count % 4 elements after them, one thread each.
template <typename Quad, typename Single>
__device__ inline void for_each_quad(std::int64_t count, Quad quad, Single single) {
  const std::int64_t quads = count / 4;
  for (std::int64_t q = first_index(); q < quads; q += grid_stride()) quad(q);
  const std::int64_t i = quads * 4 + first_index();
  if (i < count) single(i);
}

// for_each_quad where the kernel's pointers are aligned for it (kQuads), else
// single(i) for every element.
template <bool kQuads, typename Quad, typename Single>
__device__ inline void for_each_element(std::int64_t count, Quad quad, Single single) {
  if constexpr (kQuads) {
    for_each_quad(count, quad, single);
  } else {
    for (std::int64_t i = first_index(); i < count; i += grid_stride()) single(i);
  }
}
#endif

}  // namespace tessera
