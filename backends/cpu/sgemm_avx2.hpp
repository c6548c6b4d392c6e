// An f32 GEMM of our own on AVX2 and FMA, for the products that oneDNN 2.6's
// AVX2 sgemm runs slowly (backends/cpu/matmul.cpp says which it takes).
//
// Both operands are copied into panels first (BLIS' scheme: b in blocks of
// 256 x 1024 cut into 16-column panels, a in blocks of 144 x 256 cut into
// 6-row panels), so the kernel reads them in order whatever their strides and
// transposes: oneDNN's AVX2 sgemm reads a transposed a in place, and where
// its rows lie 4 KiB apart (a multiple of 1024 floats) they fall into the
// same few L1 sets. A 6 x 16 tile of out grows in 12 registers over 256
// values of k, then is added to out.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera {

// A matrix operand: element (i, j) of op(x) at data[i * stride + j], or at
// data[j * stride + i] when transposed.
struct GemmOperand {
  const float* data = nullptr;
  std::int64_t stride = 0;
  bool transposed = false;
};

// What follows the product, as a matmul's fused bias and activation:
// out = relu(alpha * op(a) op(b) + bias), bias [n] added to every row.
struct GemmEpilogue {
  const float* bias = nullptr;
  bool relu = false;
};

// Floats of scratch that sgemm_avx2 needs with `threads` threads.
std::size_t sgemm_avx2_scratch_floats(int threads);

// out[m, n] (rows out_stride floats apart) = alpha * op(a)[m, k] op(b)[k, n],
// then the epilogue, in an OpenMP team of `threads`. The CPU must run AVX2 and FMA. Every
// element's sum runs over k in the same order whatever the thread count or
// the element's place in its tile, so the result does not depend on either:
// a product split by rows or columns computes what the whole one does.
void sgemm_avx2(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, GemmOperand a, GemmOperand b, float* out,
                std::int64_t out_stride, float* scratch, int threads, const GemmEpilogue& epilogue = {});

}  // namespace tessera
