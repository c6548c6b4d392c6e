// Softmax and log-softmax over any axis, forward and backward, as host/device
// functions of one row: softmax.cu runs one thread per row, and tests check
// them on the host against the CPU backend (oneDNN's softmax_accurate and
// softmax_log, and the CPU's own loop for f32 backward over the last axis).
//
// The tensor is viewed as [outer, n, inner] around the axis: row r of the
// outer × inner rows starts at (r / inner) * n * inner + r % inner and steps
// by inner.
#pragma once

#include <math.h>

#include <cstdint>

#include "backends/host_device.hpp"

namespace tessera {

struct SoftmaxRows {
  std::int64_t outer = 1, n = 1, inner = 1;

  TESSERA_HOST_DEVICE std::int64_t count() const { return outer * inner; }
  TESSERA_HOST_DEVICE std::int64_t base(std::int64_t row) const {
    return (row / inner) * n * inner + row % inner;
  }
};

// The rows of softmax over `axis` of `dims` (rank `rank`).
inline SoftmaxRows make_softmax_rows(const std::int64_t* dims, int rank, int axis) {
  SoftmaxRows rows;
  for (int i = 0; i < axis; ++i) rows.outer *= dims[i];
  rows.n = dims[axis];
  for (int i = axis + 1; i < rank; ++i) rows.inner *= dims[i];
  return rows;
}

// y = exp(x - max) / sum(exp(x - max)), or for log-softmax
// y = x - max - log(sum(exp(x - max))): subtracting the max keeps exp finite.
TESSERA_HOST_DEVICE inline void softmax_row(const float* x, float* y, const SoftmaxRows& rows,
                                            std::int64_t row, bool log) {
  const std::int64_t base = rows.base(row), step = rows.inner;
  float max = -INFINITY;
  for (std::int64_t j = 0; j < rows.n; ++j) {
    const float v = x[base + j * step];
    max = max < v ? v : max;
  }
  float sum = 0.0f;
  for (std::int64_t j = 0; j < rows.n; ++j) sum += ::expf(x[base + j * step] - max);
  if (log) {
    const float shift = max + ::logf(sum);
    for (std::int64_t j = 0; j < rows.n; ++j) y[base + j * step] = x[base + j * step] - shift;
  } else {
    const float scale = 1.0f / sum;
    for (std::int64_t j = 0; j < rows.n; ++j)
      y[base + j * step] = ::expf(x[base + j * step] - max) * scale;
  }
}

// From the forward output y: softmax dx = y * (dy - sum(dy * y)); log-softmax
// dx = dy - exp(y) * sum(dy).
TESSERA_HOST_DEVICE inline void softmax_backward_row(const float* y, const float* dy, float* dx,
                                                     const SoftmaxRows& rows, std::int64_t row,
                                                     bool log) {
  const std::int64_t base = rows.base(row), step = rows.inner;
  float sum = 0.0f;
  for (std::int64_t j = 0; j < rows.n; ++j) {
    const std::int64_t at = base + j * step;
    sum += log ? dy[at] : dy[at] * y[at];
  }
  for (std::int64_t j = 0; j < rows.n; ++j) {
    const std::int64_t at = base + j * step;
    dx[at] = log ? dy[at] - ::expf(y[at]) * sum : y[at] * (dy[at] - sum);
  }
}

}  // namespace tessera
