// Host-side launchers of the softmax kernels (softmax.cu), f32. Each enqueues
// on `stream` and checks the launch; none synchronizes. No rows, no launch.
#pragma once

#include <cuda_runtime_api.h>

#include "backends/cuda/softmax.hpp"

namespace tessera {

// softmax_row for every row of `rows`.
void cuda_softmax(const float* x, float* y, const SoftmaxRows& rows, bool log, cudaStream_t stream);

// softmax_backward_row for every row of `rows`.
void cuda_softmax_backward(const float* y, const float* dy, float* dx, const SoftmaxRows& rows,
                           bool log, cudaStream_t stream);

}  // namespace tessera
