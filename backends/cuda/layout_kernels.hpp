// Host-side launchers of the strided copy kernel (layout.cu) that runs
// broadcast_to, transpose, slice and concat, and of the KV cache's write. Enqueues on `stream` and checks
// the launch; does not synchronize. A copy of 0 elements launches nothing.
#pragma once

#include <cuda_runtime_api.h>

#include "backends/cuda/layout.hpp"

namespace tessera {

// copy(src, dst, i) for i in [0, copy.count), elements of `element_size`
// bytes (2, 4 or 8).
void cuda_strided_copy(const void* src, void* dst, int element_size, const StridedCopy& copy,
                       cudaStream_t stream);
// write(rows, positions, cache, i) for i in [0, write.count).
void cuda_cache_write(const void* rows, const std::int32_t* positions, void* cache, int element_size,
                      const CacheWrite& write, cudaStream_t stream);

}  // namespace tessera
