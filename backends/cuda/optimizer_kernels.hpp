// Host-side launchers of the optimizer kernels (optimizer.cu), f32, in place.
// Each enqueues on `stream` and checks the launch; none synchronizes.
// `count` == 0 launches nothing.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "backends/cuda/optimizer.hpp"

namespace tessera {

void cuda_sgd_update(float* param, const float* grad, float* velocity, const SgdStep& step,
                     std::int64_t count, cudaStream_t stream);
void cuda_adam_update(float* param, const float* grad, float* m, float* v, const AdamStep& step,
                      std::int64_t count, cudaStream_t stream);
void cuda_moving_average(float* state, const float* value, float momentum, std::int64_t count,
                         cudaStream_t stream);

}  // namespace tessera
