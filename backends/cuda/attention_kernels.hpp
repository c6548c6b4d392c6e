// Host-side launcher of the cached attention kernel (attention.cu), f32.
// Enqueues on `stream` and checks the launch; does not synchronize. No rows,
// no launch.
#pragma once

#include <cuda_runtime_api.h>

#include "backends/cuda/attention.hpp"

namespace tessera {

// Every query row of `rows` (attention.hpp's passes, a warp per row, its
// scores in shared memory: C floats per warp).
void cuda_cached_attention(const float* q, const float* keys, const float* values, const std::int32_t* positions,
                           float* out, const CachedAttentionRows& rows, cudaStream_t stream);

}  // namespace tessera
