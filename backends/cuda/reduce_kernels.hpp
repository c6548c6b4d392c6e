// Host-side launcher of the reduction kernel (reduce.cu), f32. Enqueues on
// `stream` and checks the launch; does not synchronize. `out_count` == 0
// launches nothing.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "backends/cuda/reduce.hpp"
#include "backends/op_kinds.hpp"

namespace tessera {

// out[o] = reduce_element(op, x, index, o) for o in [0, out_count).
void cuda_reduce(ReduceOp op, const float* x, float* out, const ReduceIndex& index,
                 std::int64_t out_count, cudaStream_t stream);

}  // namespace tessera
