// Sum, mean and max reductions (keepdims) as host/device functions: reduce.cu
// runs them (reduce_element with one thread per output element where each
// output reduces few elements, reduce_partial over a warp or a block of
// threads per output otherwise), and tests check them on the host against the
// CPU backend.
//
// x's axes split into kept ones (out has x's extent) and reduced ones (out
// has 1): output element o reads x at kept(o) + reduced(r) for r in
// [0, count). Any set of axes works, not only the outer × reduced × inner
// patterns the CPU backend's own loops take. reduce_element's accumulation
// order (r ascending, a float accumulator, mean as sum * (1/count)) is the CPU
// loops', so its results match them bit for bit; max matches at any order.
#pragma once

#include <math.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/strided_index.hpp"
#include "backends/host_device.hpp"
#include "backends/op_kinds.hpp"

namespace tessera {

struct ReduceIndex {
  StridedIndex kept;     // output flat index → x offset of its first reduced element
  StridedIndex reduced;  // reduced-element counter → x offset relative to that
  std::int64_t count = 1;  // reduced elements per output element

  TESSERA_HOST_DEVICE std::int64_t offset(std::int64_t out_index, std::int64_t r) const {
    return kept(out_index) + reduced(r);
  }
};

// x and out have the same rank; out's extent is x's or 1 on every axis (the
// caller checked it).
inline ReduceIndex make_reduce_index(const std::vector<std::int64_t>& x,
                                     const std::vector<std::int64_t>& out) {
  const std::vector<std::int64_t> strides = contiguous_strides(x);
  std::vector<std::int64_t> reduced(x.size(), 1);
  ReduceIndex index;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (out[i] == 1) reduced[i] = x[i];
    index.count *= reduced[i];
  }
  index.kept = make_strided_index(out, strides, "reduce");
  index.reduced = make_strided_index(reduced, strides, "reduce");
  return index;
}

// The parallel kernel splits one output's reduced elements among `lanes`
// threads: lane l accumulates r = l, l + lanes, ... (reduce_partial), the
// lanes' partials meet in a fixed tree (reduce_combine), and reduce_finish
// turns the total into the output. The order is fixed, so runs repeat bit for
// bit; sums differ from the CPU's ascending loop by rounding only.
TESSERA_HOST_DEVICE inline float reduce_identity(ReduceOp op) { return op == ReduceOp::max ? -INFINITY : 0.0f; }

TESSERA_HOST_DEVICE inline float reduce_combine(ReduceOp op, float a, float b) {
  if (op == ReduceOp::max) return a < b ? b : a;  // as the CPU loop: NaNs are skipped
  return a + b;
}

TESSERA_HOST_DEVICE inline float reduce_partial(ReduceOp op, const float* x, const ReduceIndex& index,
                                                std::int64_t out_index, std::int64_t lane, std::int64_t lanes) {
  const float* base = x + index.kept(out_index);
  float acc = reduce_identity(op);
  for (std::int64_t r = lane; r < index.count; r += lanes) acc = reduce_combine(op, acc, base[index.reduced(r)]);
  return acc;
}

TESSERA_HOST_DEVICE inline float reduce_finish(ReduceOp op, float total, std::int64_t count) {
  return op == ReduceOp::mean ? total * (1.0f / static_cast<float>(count)) : total;
}

// out[out_index] of the reduction `op` of x, in the CPU loops' order: one
// lane over every reduced element, ascending.
TESSERA_HOST_DEVICE inline float reduce_element(ReduceOp op, const float* x,
                                                const ReduceIndex& index, std::int64_t out_index) {
  return reduce_finish(op, reduce_partial(op, x, index, out_index, 0, 1), index.count);
}

}  // namespace tessera
