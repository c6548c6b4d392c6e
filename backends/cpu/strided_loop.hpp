// Loops over the elements of an output shape with per-operand strides, for the
// kernels oneDNN lacks (broadcasting binary ops, broadcast, transpose). The
// innermost axis is a plain loop that the compiler vectorises; outer indices
// are spread over the OpenMP threads.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cpu/parallel_for.hpp"
#include "engine/core/shape.hpp"

namespace tessera {

// Strides (in elements) of `operand` when broadcast to `out` (0 on broadcast axes).
std::vector<std::int64_t> broadcast_strides(const Shape& operand, const Shape& out);

// Calls body(out_offset, offsets[0..k), inner_count, inner_strides[0..k)) for every
// run of the innermost axis of `out`. Operands have `strides[j]` into `out`'s axes.
template <int K, typename Body>
void for_each_row(const Shape& out, const std::vector<std::int64_t> (&strides)[K], Body&& body) {
  int rank = out.rank();
  std::int64_t inner = rank == 0 ? 1 : out[rank - 1];
  std::int64_t rows = inner == 0 ? 0 : out.numel() / inner;
  std::int64_t inner_strides[K];
  for (int j = 0; j < K; ++j) inner_strides[j] = rank == 0 ? 0 : strides[j][rank - 1];
  parallel_for(rows, rows > 64, [&](std::int64_t row) {
    std::int64_t offsets[K] = {};
    std::int64_t rest = row;
    for (int axis = rank - 2; axis >= 0; --axis) {
      std::int64_t index = rest % out[axis];
      rest /= out[axis];
      for (int j = 0; j < K; ++j) offsets[j] += index * strides[j][axis];
    }
    body(row * inner, offsets, inner, inner_strides);
  });
}

}  // namespace tessera
