// Host-side launchers of the elementwise kernels (elementwise.cu): f32 only
// for now (a unary op may round its f32 result to bf16). Each enqueues on
// `stream` and checks the launch; none synchronizes. `count` == 0 launches
// nothing.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "backends/cuda/broadcast_index.hpp"
#include "backends/op_kinds.hpp"

namespace tessera {

// y[i] = f(x[i]) (unary_forward of elementwise.hpp).
void cuda_unary(UnaryOp op, const float* x, float* y, std::int64_t count, cudaStream_t stream);
// The same rounded to bf16 (bits) as cast rounds: a cast fused into the op.
void cuda_unary_to_bf16(UnaryOp op, const float* x, std::uint16_t* y, std::int64_t count, cudaStream_t stream);

// dx[i] = dy[i] * f'(x[i]) (unary_backward of elementwise.hpp).
void cuda_unary_backward(UnaryOp op, const float* x, const float* dy, float* dx,
                         std::int64_t count, cudaStream_t stream);

// out[i] = a[index(i).a] (op) b[index(i).b] for i in [0, count).
void cuda_binary(BinaryOp op, const float* a, const float* b, float* out,
                 const BroadcastIndex& index, std::int64_t count, cudaStream_t stream);

}  // namespace tessera
