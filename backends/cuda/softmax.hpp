// Softmax and log-softmax over any axis, forward and backward, as host/device
// functions: tests check them on the host against the CPU backend (oneDNN's
// softmax_accurate and softmax_log, and the CPU's own loop for f32 backward
// over the last axis), and softmax.cu runs them on the GPU.
//
// The tensor is viewed as [outer, n, inner] around the axis: row r of the
// outer × inner rows starts at (r / inner) * n * inner + r % inner and steps
// by inner.
//
// Each pass over a row is split among `lanes` threads: lane l visits
// j = l, l + lanes, ... and the kernel combines the lanes' partials in a fixed
// tree, so runs repeat bit for bit. With the axis last (inner == 1) and rows of
// at least kSoftmaxWarpFrom elements, a warp takes each row (32 lanes, whose
// loads are then coalesced); otherwise a thread does (lanes == 1: softmax_row),
// as adjacent rows are then adjacent in memory, or too short to split.
//
// A causal softmax (Backend::softmax) over the last axis of [..., m, n] sees
// only the first valid(row) elements of each row; the others are written 0.
#pragma once

#include <math.h>

#include <cstdint>

#include "backends/host_device.hpp"

namespace tessera {

struct SoftmaxRows {
  std::int64_t outer = 1, n = 1, inner = 1;
  std::int64_t causal_queries = 0;  // m of a causal softmax (inner == 1), else 0

  TESSERA_HOST_DEVICE std::int64_t count() const { return outer * inner; }
  TESSERA_HOST_DEVICE std::int64_t base(std::int64_t row) const {
    return (row / inner) * n * inner + row % inner;
  }
  // The elements of `row` that count: all n, or for a causal softmax those up
  // to its query's position (query i of m is position i + n - m).
  TESSERA_HOST_DEVICE std::int64_t valid(std::int64_t row) const {
    return causal_queries == 0 ? n : row % causal_queries + 1 + n - causal_queries;
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

// The rows of a causal softmax over the last axis of `dims` ([..., m, n]).
inline SoftmaxRows make_causal_softmax_rows(const std::int64_t* dims, int rank) {
  SoftmaxRows rows = make_softmax_rows(dims, rank, rank - 1);
  rows.causal_queries = dims[rank - 2];
  return rows;
}

// Below a warp's width a row would leave lanes idle.
inline constexpr std::int64_t kSoftmaxWarpFrom = 32;

// Whether softmax.cu gives each row a warp (else a thread).
inline bool softmax_warp_per_row(const SoftmaxRows& rows) {
  return rows.inner == 1 && rows.n >= kSoftmaxWarpFrom;
}

// The max of this lane's elements of the row (-inf where it has none; NaNs
// are skipped, as the CPU loop skips them).
TESSERA_HOST_DEVICE inline float softmax_partial_max(const float* x, const SoftmaxRows& rows,
                                                     std::int64_t row, std::int64_t lane,
                                                     std::int64_t lanes) {
  const std::int64_t base = rows.base(row), step = rows.inner, valid = rows.valid(row);
  float max = -INFINITY;
  for (std::int64_t j = lane; j < valid; j += lanes) {
    const float v = x[base + j * step];
    max = max < v ? v : max;
  }
  return max;
}

TESSERA_HOST_DEVICE inline float softmax_max_combine(float a, float b) { return a < b ? b : a; }

// This lane's part of sum(exp(x - max)), max being the whole row's.
TESSERA_HOST_DEVICE inline float softmax_partial_sum(const float* x, const SoftmaxRows& rows,
                                                     std::int64_t row, float max, std::int64_t lane,
                                                     std::int64_t lanes) {
  const std::int64_t base = rows.base(row), step = rows.inner, valid = rows.valid(row);
  float sum = 0.0f;
  for (std::int64_t j = lane; j < valid; j += lanes) sum += ::expf(x[base + j * step] - max);
  return sum;
}

// y = exp(x - max) / sum, or for log-softmax y = x - max - log(sum), over this
// lane's elements, given the whole row's max and sum (0 past a causal row's end).
TESSERA_HOST_DEVICE inline void softmax_write(const float* x, float* y, const SoftmaxRows& rows,
                                              std::int64_t row, float max, float sum, bool log,
                                              std::int64_t lane, std::int64_t lanes) {
  const std::int64_t base = rows.base(row), step = rows.inner;
  if (log) {
    const float shift = max + ::logf(sum);
    for (std::int64_t j = lane; j < rows.n; j += lanes) y[base + j * step] = x[base + j * step] - shift;
  } else {
    const float scale = 1.0f / sum;
    const std::int64_t valid = rows.valid(row);
    for (std::int64_t j = lane; j < rows.n; j += lanes)
      y[base + j * step] = j < valid ? ::expf(x[base + j * step] - max) * scale : 0.0f;
  }
}

// y = exp(x - max) / sum(exp(x - max)), or for log-softmax
// y = x - max - log(sum(exp(x - max))): subtracting the max keeps exp finite.
// One lane, j ascending.
TESSERA_HOST_DEVICE inline void softmax_row(const float* x, float* y, const SoftmaxRows& rows,
                                            std::int64_t row, bool log) {
  const float max = softmax_partial_max(x, rows, row, 0, 1);
  const float sum = softmax_partial_sum(x, rows, row, max, 0, 1);
  softmax_write(x, y, rows, row, max, sum, log, 0, 1);
}

// This lane's part of the backward's sum: sum(dy * y) for softmax, sum(dy)
// for log-softmax.
TESSERA_HOST_DEVICE inline float softmax_backward_partial(const float* y, const float* dy,
                                                          const SoftmaxRows& rows, std::int64_t row,
                                                          bool log, std::int64_t lane,
                                                          std::int64_t lanes) {
  const std::int64_t base = rows.base(row), step = rows.inner;
  float sum = 0.0f;
  for (std::int64_t j = lane; j < rows.n; j += lanes) {
    const std::int64_t at = base + j * step;
    sum += log ? dy[at] : dy[at] * y[at];
  }
  return sum;
}

// dx over this lane's elements, given the whole row's sum.
TESSERA_HOST_DEVICE inline void softmax_backward_write(const float* y, const float* dy, float* dx,
                                                       const SoftmaxRows& rows, std::int64_t row,
                                                       float sum, bool log, std::int64_t lane,
                                                       std::int64_t lanes) {
  const std::int64_t base = rows.base(row), step = rows.inner;
  for (std::int64_t j = lane; j < rows.n; j += lanes) {
    const std::int64_t at = base + j * step;
    dx[at] = log ? dy[at] - ::expf(y[at]) * sum : y[at] * (dy[at] - sum);
  }
}

// From the forward output y: softmax dx = y * (dy - sum(dy * y)); log-softmax
// dx = dy - exp(y) * sum(dy). One lane, j ascending.
TESSERA_HOST_DEVICE inline void softmax_backward_row(const float* y, const float* dy, float* dx,
                                                     const SoftmaxRows& rows, std::int64_t row,
                                                     bool log) {
  const float sum = softmax_backward_partial(y, dy, rows, row, log, 0, 1);
  softmax_backward_write(y, dy, dx, rows, row, sum, log, 0, 1);
}

}  // namespace tessera
