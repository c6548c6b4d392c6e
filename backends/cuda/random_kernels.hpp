// Host-side launchers of the random fill and dropout kernels (random.cu),
// f32. Each enqueues on `stream` and checks the launch; none synchronizes.
// `count` == 0 launches nothing.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "backends/cuda/random.hpp"

namespace tessera {

void cuda_random_uniform(float* out, const UniformFill& fill, std::int64_t count, cudaStream_t stream);
void cuda_random_normal(float* out, const NormalFill& fill, std::int64_t count, cudaStream_t stream);
void cuda_dropout(const float* x, float* out, const Dropout& dropout, std::int64_t count,
                  cudaStream_t stream);

}  // namespace tessera
