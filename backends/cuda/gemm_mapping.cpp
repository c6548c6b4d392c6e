#include "backends/cuda/gemm_mapping.hpp"

#include <algorithm>
#include <cstddef>

namespace tessera {
namespace {

// One output batch axis: its extent and the element stride of each operand
// along it (0 where the operand is broadcast).
struct BatchAxis {
  std::int64_t extent, stride_a, stride_b, stride_c;
};

// Element strides of the batch axes of a dense row-major operand, aligned to
// the output's `batch_rank` batch axes (missing or extent-1 axes get 0).
std::vector<std::int64_t> batch_strides(const Shape& shape, int batch_rank) {
  int rank = shape.rank();
  std::vector<std::int64_t> strides(static_cast<std::size_t>(batch_rank), 0);
  std::int64_t stride = shape[rank - 2] * shape[rank - 1];
  for (int axis = rank - 3; axis >= 0; --axis) {
    int out_axis = axis + batch_rank - (rank - 2);
    if (shape[axis] != 1) strides[static_cast<std::size_t>(out_axis)] = stride;
    stride *= shape[axis];
  }
  return strides;
}

}  // namespace

ColumnMajorGemm column_major_gemm(const Shape& a, const Shape& b, const MatmulArgs& args) {
  Shape out = matmul_output_shape(a, b, args);  // validates the operands
  const int ra = a.rank(), rb = b.rank(), ro = out.rank();
  const std::int64_t m = out[ro - 2], n = out[ro - 1];
  const std::int64_t k = args.transpose_a ? a[ra - 2] : a[ra - 1];

  ColumnMajorGemm g;
  g.swap_operands = true;
  g.transa = args.transpose_b;  // cuBLAS's A is b
  g.transb = args.transpose_a;  // cuBLAS's B is a
  g.m = n;
  g.n = m;
  g.k = k;
  g.lda = std::max<std::int64_t>(1, b[rb - 1]);
  g.ldb = std::max<std::int64_t>(1, a[ra - 1]);
  g.ldc = std::max<std::int64_t>(1, n);
  if (out.numel() == 0) return g;  // nothing to compute: no calls

  // Batch axes of the output, without the extent-1 ones (they move nothing).
  const int batch_rank = ro - 2;
  auto sa = batch_strides(a, batch_rank), sb = batch_strides(b, batch_rank);
  std::vector<BatchAxis> axes;
  std::int64_t stride_c = m * n;
  std::vector<std::int64_t> sc(static_cast<std::size_t>(batch_rank));
  for (int axis = batch_rank - 1; axis >= 0; --axis) {
    sc[static_cast<std::size_t>(axis)] = stride_c;
    stride_c *= out[axis];
  }
  for (int axis = 0; axis < batch_rank; ++axis) {
    auto i = static_cast<std::size_t>(axis);
    if (out[axis] != 1) axes.push_back({out[axis], sa[i], sb[i], sc[i]});
  }

  // Fold the innermost axes that one stride per operand describes into one
  // strided-batched call.
  std::int64_t count = 1, inner_a = 0, inner_b = 0, inner_c = 0;
  std::size_t outer = axes.size();
  if (!axes.empty()) {
    const BatchAxis& last = axes.back();
    count = last.extent;
    inner_a = last.stride_a;
    inner_b = last.stride_b;
    inner_c = last.stride_c;
    outer = axes.size() - 1;
    while (outer > 0) {
      const BatchAxis& axis = axes[outer - 1];
      if (axis.stride_a != inner_a * count || axis.stride_b != inner_b * count ||
          axis.stride_c != inner_c * count)
        break;
      count *= axis.extent;
      --outer;
    }
  }

  // A weight shared by every problem of the call, against a dense untransposed
  // a: the problems stack into one GEMM of count * M rows.
  if (count > 1 && inner_b == 0 && !args.transpose_a && inner_a == m * k && inner_c == m * n) {
    g.n = m * count;
    count = 1;
    inner_a = inner_c = 0;
  }
  g.batch_count = count;
  g.stride_a = inner_b;  // cuBLAS's A is b
  g.stride_b = inner_a;
  g.stride_c = inner_c;
  if (g.batch_count == 1) g.stride_a = g.stride_b = 0, g.stride_c = g.ldc * g.n;  // unused by cuBLAS

  // Enumerate the outer axes (row-major) as separate calls.
  std::vector<std::int64_t> index(outer, 0);
  while (true) {
    GemmCall call;
    for (std::size_t i = 0; i < outer; ++i) {
      call.offset_a += index[i] * axes[i].stride_b;
      call.offset_b += index[i] * axes[i].stride_a;
      call.offset_c += index[i] * axes[i].stride_c;
    }
    g.calls.push_back(call);
    std::size_t i = outer;
    while (i > 0 && ++index[i - 1] == axes[i - 1].extent) index[--i] = 0;
    if (i == 0) break;
  }
  return g;
}

}  // namespace tessera
