// Tensor-core products held in registers (sm_80 on), for kernels that keep
// their operands and sums in a warp's registers instead of WMMA fragments
// stored through shared memory: mma.sync's 16 x 8 x 16 bf16 product with f32
// sums, and ldmatrix, which reads its operands from shared memory already in
// the layout the product takes (PTX ISA, "Matrix fragments for mma.m16n8k16").
//
// Lane l of a warp is in group g = l / 4 at position t = l % 4. Of a 16 x 8
// f32 accumulator it holds rows g and g + 8 at columns 2t and 2t + 1:
//   c[0], c[1] row g;  c[2], c[3] row g + 8.
// Of a 16 x 16 bf16 A operand (row-major) it holds, two bf16 a register:
//   a[0] row g, columns 2t, 2t+1;  a[1] row g + 8, the same columns;
//   a[2] row g, columns 2t+8, 2t+9;  a[3] row g + 8, those columns.
// So the accumulators of two neighbouring 8-column tiles, rounded to bf16,
// are the A operand of the next product as they are (pack_bf16): attention's
// weights go from Q K^T to P V without leaving the registers.
// Of a 16 x 8 B operand (16 rows k, 8 columns n) it holds b[0] = rows 2t,
// 2t+1 of column g and b[1] = rows 2t+8, 2t+9 of column g.
#pragma once

#if defined(__CUDACC__)  // device code: included by the .cu files only
#include <cuda_bf16.h>

#include "backends/cuda/mma_layout.hpp"

namespace tessera::mma {

using bf16 = __nv_bfloat16;

// d += a b: a 16 x 16 bf16 A, a 16 x 8 bf16 B (b0, b1), f32 sums.
__device__ __forceinline__ void product(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Zeros M x N accumulators (unrolled: they must stay in registers).
template <int M, int N>
__device__ __forceinline__ void clear(float (&c)[M][N][4]) {
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int n = 0; n < N; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) c[m][n][e] = 0.0f;
}

// Four 8 x 8 bf16 matrices from shared memory: lane l gives the address of
// row l % 8 of matrix l / 8 (16 bytes), and receives, of each matrix i, in
// r[i], row g's columns 2t and 2t + 1.
__device__ __forceinline__ void load_matrices(unsigned (&r)[4], const bf16* row) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// As load_matrices, each matrix transposed: lane l receives rows 2t and
// 2t + 1 of column g. A row-major [k, n] tile so read is a B operand.
__device__ __forceinline__ void load_matrices_transposed(unsigned (&r)[4], const bf16* row) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// Two f32 rounded to bf16 in one register, `low` in the lower half (the
// lower column of an operand's pair).
__device__ __forceinline__ unsigned pack_bf16(float low, float high) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(low, high);
  return *reinterpret_cast<const unsigned*>(&pair);
}

// 2^x by the special-function unit (ex2.approx: 2 ulp; 2^-inf = +0).
__device__ __forceinline__ float exp2_fast(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// The total and the max of a row's values over the four lanes of a group,
// which together hold the row (lanes l ^ 1 and l ^ 2). Every lane of the
// group gets the same sum, as addition is commutative, and the same max up to
// the sign of a zero.
__device__ __forceinline__ float group_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
__device__ __forceinline__ float group_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

}  // namespace tessera::mma
#endif
