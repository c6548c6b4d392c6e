// Host-side launchers of the CUDA backend's own kernels (cuda_kernels.cu).
// Each enqueues on `stream` and checks the launch; none synchronizes.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "backends/op_kinds.hpp"

namespace tessera {

// data[0 .. count) = the `element_size`-byte pattern `bits` (element_size is 2,
// 4 or 8; the low bytes of `bits` are used). Covers every dtype's fill.
void cuda_fill(void* data, std::int64_t count, int element_size, std::uint64_t bits,
               cudaStream_t stream);

// out[r, c] = act(product[r, c] + bias[c]) (matmul_epilogue of epilogue.hpp)
// over a row-major f32 product[rows, cols]: out is f32 (product itself, in
// place, or another array), or bf16 when out_bf16, rounded once. `bias` is
// null (nothing added) or [cols] f32, or bf16 when bias_bf16.
void cuda_matmul_epilogue(const float* product, void* out, bool out_bf16, const void* bias, bool bias_bf16,
                          std::int64_t rows, std::int64_t cols, Activation act, cudaStream_t stream);

}  // namespace tessera
