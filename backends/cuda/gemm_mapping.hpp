// Row-major Tessera matmul → column-major cuBLAS GEMM arguments.
//
// Plain C++ with no CUDA headers, compiled into every build, so the mapping is
// unit-tested on machines without a GPU (tests/backends/gemm_mapping_test.cpp
// feeds it to a column-major reference GEMM).
//
// A row-major matrix X[r, c] is, read column-major with leading dimension c,
// the matrix Xᵀ. So for row-major C[M, N] = op(A)[M, K] op(B)[K, N], cuBLAS
// computes the column-major Cᵀ[N, M] = op(B)ᵀ op(A)ᵀ: the operands swap places
// (cuBLAS's A is Tessera's b, cuBLAS's B is Tessera's a), m = N, n = M, and each
// operand keeps its own transpose flag and its stored row length as leading
// dimension.
//
// Batch axes broadcast (NumPy rules, as in matmul_output_shape). Every output
// matrix is one problem of a strided-batched GEMM: a broadcast operand has
// batch stride 0. When one stride per operand cannot describe all the batch
// axes (e.g. a[2, 1, M, K] against b[1, 3, K, N]), the innermost axes that can
// be folded form one strided-batched call and the outer axes are enumerated as
// several calls (`calls`), each with its own base offsets.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/op_args.hpp"
#include "engine/core/shape.hpp"

namespace tessera {

// Element offsets of the first matrices of one strided-batched call, named by
// cuBLAS operand (offset_a is into cuBLAS's A, i.e. into Tessera's b).
struct GemmCall {
  std::int64_t offset_a = 0, offset_b = 0, offset_c = 0;
  bool operator==(const GemmCall&) const = default;
};

// Arguments of cublasGemmStridedBatchedEx (column-major, cuBLAS's names), one
// call per entry of `calls`.
struct ColumnMajorGemm {
  // Always true for a row-major caller: cuBLAS's A is Tessera's b and cuBLAS's
  // B is Tessera's a. Kept explicit so callers do not have to remember it.
  bool swap_operands = true;
  bool transa = false, transb = false;  // op() of cuBLAS's A and B
  std::int64_t m = 0, n = 0, k = 0;     // cuBLAS's C is m x n, op(A) m x k, op(B) k x n
  std::int64_t lda = 1, ldb = 1, ldc = 1;
  std::int64_t batch_count = 0;         // problems per call
  // Elements between the problems of one call (0: a broadcast operand). With
  // one problem, 0, 0 and C's packed size (cuBLAS ignores them).
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  std::vector<GemmCall> calls;          // empty when the output has no elements

  // The output has elements but K = 0: it is all zeros and no GEMM is needed
  // (the caller fills it; cuBLAS's k = 0 behaviour is not relied upon).
  bool zero_k() const { return k == 0; }
};

// The cuBLAS arguments for out = op(a) @ op(b) with row-major dense operands of
// shapes `a` and `b` (rank >= 2). Throws ShapeError as matmul_output_shape does.
//
// A rank-2 (or batch-broadcast) b against a batched, untransposed a is folded
// into a single GEMM with n = batch * M: a[B, M, K] is the same memory as
// a[B * M, K] and the output the same as [B * M, N].
ColumnMajorGemm column_major_gemm(const Shape& a, const Shape& b, const MatmulArgs& args);

}  // namespace tessera
