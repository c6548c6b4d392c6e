// Host-side launcher of the cast kernel (cast.cu). Enqueues on `stream` and
// checks the launch; does not synchronize. 0 elements launch nothing.
#pragma once

#include <cuda_runtime_api.h>

#include "backends/cuda/cast.hpp"

namespace tessera {

void cuda_cast(const void* src, void* dst, const CastElements& cast, std::int64_t n,
               cudaStream_t stream);

}  // namespace tessera
