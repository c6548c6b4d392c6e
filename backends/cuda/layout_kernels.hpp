// Host-side launcher of the strided copy kernel (layout.cu) that runs
// broadcast_to, transpose, slice and concat. Enqueues on `stream` and checks
// the launch; does not synchronize. A copy of 0 elements launches nothing.
#pragma once

#include <cuda_runtime_api.h>

#include "backends/cuda/layout.hpp"

namespace tessera {

// copy(src, dst, i) for i in [0, copy.count), elements of `element_size`
// bytes (2, 4 or 8).
void cuda_strided_copy(const void* src, void* dst, int element_size, const StridedCopy& copy,
                       cudaStream_t stream);

}  // namespace tessera
