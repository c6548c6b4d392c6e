// Sum, mean and max reductions (keepdims) as host/device functions: reduce.cu
// runs them, and tests check them on the host against the CPU backend.
//
// x's axes split into kept ones (out has x's extent) and reduced ones (out
// has 1). Where the reduced axes form one run (extent-1 axes aside), x is a
// ReduceView [outer, count, inner] and an output's elements are found with
// one division per output; that covers a bias gradient (rows summed per
// feature: outer 1), a norm (everything: inner 1) and softmax-like rows. Any
// other set of axes takes a ReduceIndex, with divisions per element.
//
// The kernels split an output's elements among lanes (threads): lane l
// accumulates r = l, l + lanes, ... of its range, and the lanes' partials meet
// in a fixed order, so runs repeat bit for bit. One lane over every element
// (the thread-per-output kernel) adds in the CPU loops' order (r ascending, a
// float accumulator, mean as sum * (1/count)), so its results match them bit
// for bit; max matches at any order.
#pragma once

#include <math.h>

#include <algorithm>
#include <cstdint>
#include <optional>
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

// x as [outer, count, inner] around the reduced run: output o = a * inner + c
// reads x[(a * count + r) * inner + c] for r in [0, count).
struct ReduceView {
  std::int64_t outer = 1, count = 1, inner = 1;
};

// The view of reducing x into out (same rank, out's extent x's or 1 on every
// axis), or nullopt when kept axes of x lie between reduced ones.
inline std::optional<ReduceView> make_reduce_view(const std::vector<std::int64_t>& x,
                                                  const std::vector<std::int64_t>& out) {
  ReduceView view;
  enum { outer_axes, reduced_axes, inner_axes } at = outer_axes;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (x[i] == 1) continue;
    if (out[i] == 1) {
      if (at == inner_axes) return std::nullopt;
      at = reduced_axes;
      view.count *= x[i];
    } else if (at == outer_axes) {
      view.outer *= x[i];
    } else {
      at = inner_axes;
      view.inner *= x[i];
    }
  }
  return view;
}

// How the view kernels (reduce.cu) split a view's work: host code, so that
// tests can walk the same plan. It depends on the shape only, so every device
// adds in the same order.
// Below this many reduced elements per output, a thread per output is best.
inline constexpr std::int64_t kReduceThreadPerOutputBelow = 32;
// Blocks per output when each reduces at least this many and they are fewer
// than ...MaxOutputs: a warp each would leave most SMs idle.
inline constexpr std::int64_t kReduceBlockPerOutputFrom = 4096;
inline constexpr std::int64_t kReduceBlockPerOutputMaxOutputs = 2048;
// Chunks: enough blocks for a few waves on any current GPU, each chunk big
// enough to pay for its block.
inline constexpr std::int64_t kReduceChunkTargetBlocks = 1024;
inline constexpr std::int64_t kReduceMinChunk = 8192;
inline constexpr int kReduceChunkThreads = 1024;
// Columns: with this many outputs a thread each fills the GPU; otherwise
// blocks of 32 columns x 32 row lanes. Where those blocks are too few to fill
// a GPU (a bias gradient of [8192, 768]: 24), each column's rows split into
// chunks of at least kReduceMinColumnChunk rows, up to about
// kReduceColumnTargetBlocks blocks in all, whose partials a second kernel
// totals.
inline constexpr std::int64_t kReduceThreadPerColumnFrom = 65536;
inline constexpr int kReduceColumnRowLanes = 32;
inline constexpr std::int64_t kReduceColumnTargetBlocks = 512;
inline constexpr std::int64_t kReduceMinColumnChunk = 512;
// The backend's scratch for partial sums: a view's chunks (at most
// kReduceChunkTargetBlocks + outputs of them, or a column chunk's per output)
// and layer norm's dgamma/dbeta chunks (layer_norm_param_chunks keeps within it).
inline constexpr std::int64_t kReduceScratchFloats = 16384;
static_assert(kReduceChunkTargetBlocks + kReduceBlockPerOutputMaxOutputs <= kReduceScratchFloats);

TESSERA_HOST_DEVICE inline std::int64_t reduce_ceil_div(std::int64_t a, std::int64_t b) {
  return a / b + (a % b != 0 ? 1 : 0);
}

struct ReducePlan {
  enum Kernel { thread_per_output, warp_per_output, chunks_then_totals, column_tiles, column_chunks };
  Kernel kernel = thread_per_output;
  // chunks_then_totals, column_chunks: elements (rows) per chunk (the last may be short)
  std::int64_t chunk = 0;
  // and chunks per output: a block of kReduceChunkThreads each, or per tile of 32 columns
  std::int64_t chunks = 1;
};

// The chunks of `count` elements that `chunks` asks for, at least one, none empty.
inline ReducePlan chunked(ReducePlan::Kernel kernel, std::int64_t count, std::int64_t chunks) {
  const std::int64_t chunk = reduce_ceil_div(count, chunks < 1 ? 1 : chunks);
  return {kernel, chunk, reduce_ceil_div(count, chunk)};
}

inline ReducePlan plan_reduce(const ReduceView& view) {
  const std::int64_t outputs = view.outer * view.inner;
  if (view.count < kReduceThreadPerOutputBelow) return {ReducePlan::thread_per_output};
  if (view.inner > 1) {
    if (outputs >= kReduceThreadPerColumnFrom) return {ReducePlan::thread_per_output};
    const std::int64_t tiles = view.outer * reduce_ceil_div(view.inner, kReduceColumnRowLanes);
    std::int64_t chunks = reduce_ceil_div(kReduceColumnTargetBlocks, tiles);
    chunks = std::min({chunks, view.count / kReduceMinColumnChunk, kReduceScratchFloats / outputs});
    if (chunks <= 1) return {ReducePlan::column_tiles};
    return chunked(ReducePlan::column_chunks, view.count, chunks);
  }
  if (view.count < kReduceBlockPerOutputFrom || outputs >= kReduceBlockPerOutputMaxOutputs)
    return {ReducePlan::warp_per_output};
  std::int64_t chunks = reduce_ceil_div(kReduceChunkTargetBlocks, outputs);
  const std::int64_t most = reduce_ceil_div(view.count, kReduceMinChunk);
  if (chunks > most) chunks = most;
  return chunked(ReducePlan::chunks_then_totals, view.count, chunks);
}

// The reduce kernels' partials meet through reduce_combine; reduce_finish
// turns the total into the output.
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

// Lane `lane` of `lanes` over the elements [begin, end) of output o of a view.
// Loads are independent of the running total, so the GPU may issue several
// at once (unrolled) while the additions keep their order.
TESSERA_HOST_DEVICE inline float reduce_view_partial(ReduceOp op, const float* x, const ReduceView& view,
                                                     std::int64_t out_index, std::int64_t begin,
                                                     std::int64_t end, std::int64_t lane, std::int64_t lanes) {
  const std::int64_t a = out_index / view.inner, c = out_index - a * view.inner;
  const float* base = x + a * view.count * view.inner + c;
  float acc = reduce_identity(op);
#if defined(__CUDA_ARCH__)
#pragma unroll 4
#endif
  for (std::int64_t r = begin + lane; r < end; r += lanes) acc = reduce_combine(op, acc, base[r * view.inner]);
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
