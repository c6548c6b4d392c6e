// Host-side launchers of the softmax kernels (softmax.cu), f32. Each enqueues
// on `stream` and checks the launch; none synchronizes. No rows, no launch.
#pragma once

#include <cuda_runtime_api.h>

#include "backends/cuda/softmax.hpp"

namespace tessera {

// Softmax of every row of `rows`: the passes of softmax.hpp split over a warp
// per row where softmax_warp_per_row, else softmax_row in a thread per row.
void cuda_softmax(const float* x, float* y, const SoftmaxRows& rows, bool log, cudaStream_t stream);

// The backward of every row of `rows`, split the same way
// (softmax_backward_row where a thread takes the row).
void cuda_softmax_backward(const float* y, const float* dy, float* dx, const SoftmaxRows& rows,
                           bool log, cudaStream_t stream);

}  // namespace tessera
