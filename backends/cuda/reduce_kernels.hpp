// Host-side launchers of the reduction kernels (reduce.cu), f32. Each
// enqueues on `stream` and checks its launches; none synchronizes.
// `out_count` == 0 launches nothing.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "backends/cuda/reduce.hpp"
#include "backends/op_kinds.hpp"

namespace tessera {

// out[o] = reduce_element(op, x, index, o) for o in [0, out_count).
void cuda_reduce(ReduceOp op, const float* x, float* out, const ReduceIndex& index,
                 std::int64_t out_count, cudaStream_t stream);

// The same reduction where it has a view: view.outer * view.inner outputs.
// `scratch`: kReduceScratchFloats of device memory for partial results, the
// caller's, reused from call to call on the same stream.
void cuda_reduce_view(ReduceOp op, const float* x, float* out, const ReduceView& view,
                      float* scratch, cudaStream_t stream);

}  // namespace tessera
