// A warp's total by the fixed shuffle-down tree (offsets 16, 8, 4, 2, 1): the
// same order on every run, so the reduce, softmax and layer-norm kernels give
// the same bits each time. Every lane of the warp must call it.
#pragma once

namespace tessera {

inline constexpr int kWarpLanes = 32;

#if defined(__CUDACC__)
// Lane 0 holds the total of the lanes' `v` under `combine(mine, theirs)`.
template <typename Combine>
__device__ inline float warp_tree(float v, Combine combine) {
  for (int offset = kWarpLanes / 2; offset > 0; offset /= 2) v = combine(v, __shfl_down_sync(0xffffffffu, v, offset));
  return v;
}

// Lane 0's total given to every lane, so all of them write with the same bits
// (a butterfly could leave lanes with different ones: max is not commutative
// on -0 and +0).
template <typename Combine>
__device__ inline float warp_tree_to_all(float v, Combine combine) {
  return __shfl_sync(0xffffffffu, warp_tree(v, combine), 0);
}

// The warp's sum and max, every lane given lane 0's.
__device__ inline float warp_sum(float v) {
  return warp_tree_to_all(v, [](float a, float b) { return a + b; });
}

__device__ inline float warp_max(float v) {
  return warp_tree_to_all(v, [](float a, float b) { return a < b ? b : a; });
}
#endif

}  // namespace tessera
