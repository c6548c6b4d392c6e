// Sum, mean and max reductions (keepdims form).
//
// The axes collapse to at most three groups, outer x reduced x inner, which
// covers every reduction the engine makes (bias gradients reduce the leading
// axes, norms and losses the trailing ones) with vectorisable loops. oneDNN's
// reduction primitive takes the other patterns; its reference kernel, which it
// picks for leading-axis sums, was 40% of a GPT training step.
#include <omp.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <vector>

#include "backends/cpu/parallel_for.hpp"
#include "backends/cpu/cpu_backend.hpp"

namespace tessera {
namespace {

// x viewed as [outer, reduced, inner] when out keeps outer and inner.
struct Collapsed {
  std::int64_t outer = 1, reduced = 1, inner = 1;
};

std::optional<Collapsed> collapse(const Shape& x, const Shape& out) {
  Collapsed c;
  int phase = 0;  // 0: outer (kept), 1: reduced, 2: inner (kept)
  for (int i = 0; i < x.rank(); ++i) {
    if (x[i] == 1) continue;  // size-1 axes fit any group
    bool reduced = out[i] == 1;
    if (phase == 0 && reduced) phase = 1;
    if (phase == 1 && !reduced) phase = 2;
    if (phase == 2 && reduced) return std::nullopt;  // two reduced groups
    (phase == 0 ? c.outer : phase == 1 ? c.reduced : c.inner) *= x[i];
  }
  return c;
}

// out[i] = scale * (sum or max over r of x[r * stride + i]), i < width: the
// column reduction's loop, compiled for AVX-512, AVX2 and the baseline (the
// library is built without -march).
__attribute__((target_clones("avx512f", "avx2", "default")))
void accumulate_rows(ReduceOp op, const float* __restrict x, std::int64_t rows, std::int64_t stride,
                     std::int64_t width, float init, float scale, float* __restrict out) {
  for (std::int64_t i = 0; i < width; ++i) out[i] = init;
  if (op == ReduceOp::max) {
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t i = 0; i < width; ++i) out[i] = std::max(out[i], x[r * stride + i]);
  } else {
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t i = 0; i < width; ++i) out[i] += x[r * stride + i];
  }
  if (scale != 1.0f)
    for (std::int64_t i = 0; i < width; ++i) out[i] *= scale;
}

// Whether a column reduction splits its rows over the threads (partial rows,
// then their sum) rather than its columns: few outputs over many rows, as a
// convolution's bias gradient (32 or 64 columns over N*H*W rows). Split by
// columns, each thread read half of every pair of cache lines and the 2-thread
// sum ran slower than one thread's.
bool split_rows(const Collapsed& c, int threads) {
  return threads > 1 && c.inner > 1 && c.outer < threads && c.reduced >= 64 * threads;
}

// out[o, i] over the rows split in `threads` fixed shares: each share's sum
// into its own row of `partials` [threads, inner], then those rows combined in
// order, so a thread count always gives the same result.
void reduce_split_rows(ReduceOp op, const float* x, float* out, const Collapsed& c, int threads,
                       float init, float scale, float* partials) {
  for (std::int64_t o = 0; o < c.outer; ++o) {
    const float* xo = x + o * c.reduced * c.inner;
#pragma omp parallel for schedule(static)
    for (int t = 0; t < threads; ++t) {
      const std::int64_t begin = c.reduced * t / threads, end = c.reduced * (t + 1) / threads;
      accumulate_rows(op, xo + begin * c.inner, end - begin, c.inner, c.inner, init, 1.0f,
                      partials + t * c.inner);
    }
    for (std::int64_t i = 0; i < c.inner; ++i) {
      float acc = partials[i];
      for (int t = 1; t < threads; ++t)
        acc = op == ReduceOp::max ? std::max(acc, partials[t * c.inner + i]) : acc + partials[t * c.inner + i];
      out[o * c.inner + i] = acc * scale;
    }
  }
}

void reduce_collapsed(ReduceOp op, const float* x, float* out, const Collapsed& c, int threads,
                      float* partials) {
  float init = op == ReduceOp::max ? -std::numeric_limits<float>::infinity() : 0.0f;
  float scale = op == ReduceOp::mean ? 1.0f / static_cast<float>(c.reduced) : 1.0f;
  if (c.inner == 1) {
    // Rows: one horizontal reduction per outer index.
    parallel_for(c.outer, c.outer * c.reduced > 32768, [&](std::int64_t o) {
      const float* row = x + o * c.reduced;
      float acc = init;
      if (op == ReduceOp::max) {
        for (std::int64_t r = 0; r < c.reduced; ++r) acc = std::max(acc, row[r]);
      } else {
        for (std::int64_t r = 0; r < c.reduced; ++r) acc += row[r];
      }
      out[o] = acc * scale;
    });
    return;
  }
  // Columns: accumulate whole rows of `inner` values, vectorised along them.
  // Threads split the outer index when there are enough of them, else the
  // columns, in blocks of whole 64-byte lines (a bias gradient is one outer
  // index: split by 256 columns, its 256-wide ones ran on one thread).
  if (split_rows(c, threads)) return reduce_split_rows(op, x, out, c, threads, init, scale, partials);
  const bool split_outer = c.outer >= threads;
  const std::int64_t per_thread = (c.inner + threads - 1) / threads;
  const std::int64_t block = split_outer ? c.inner : (per_thread + 15) / 16 * 16;
  const std::int64_t blocks_per_outer = (c.inner + block - 1) / block;
  parallel_for(c.outer * blocks_per_outer, c.outer * c.reduced * c.inner > 32768, [&](std::int64_t b) {
    std::int64_t o = b / blocks_per_outer, begin = b % blocks_per_outer * block;
    std::int64_t width = std::min(c.inner, begin + block) - begin;
    accumulate_rows(op, x + o * c.reduced * c.inner + begin, c.reduced, c.inner, width, init, scale,
                    out + o * c.inner + begin);
  });
}

}  // namespace

void CpuBackend::run_reduce(ReduceOp op, const Tensor& x, const Tensor& out) {
  if (x.shape() == out.shape()) return run_copy(x, out);
  if (auto c = collapse(x.shape(), out.shape()); c && x.dtype() == DType::f32) {  // an empty axis too: max's -inf
    KernelScope scope(threads());
    float* partials = nullptr;
    if (split_rows(*c, threads()))
      partials = static_cast<float*>(
          scratch_buffer("reduce partials", sizeof(float) * static_cast<std::size_t>(threads() * c->inner)).data());
    return reduce_collapsed(op, x.data<float>(), out.data<float>(), *c, threads(), partials);
  }
  auto x_md = plain_desc(x.shape(), x.dtype());
  auto out_md = plain_desc(out.shape(), out.dtype());
  dnnl::algorithm alg = op == ReduceOp::sum    ? dnnl::algorithm::reduction_sum
                        : op == ReduceOp::mean ? dnnl::algorithm::reduction_mean
                                               : dnnl::algorithm::reduction_max;
  std::string key = "reduce " + std::string(tessera::name(op)) + cache_key(x) + cache_key(out);
  const Primitive& p = primitive(key, [&] {
    dnnl::reduction::desc desc(alg, x_md, out_md, 0.0f, 0.0f);
    dnnl::reduction::primitive_desc pd(desc, default_attr(), engine());
    return Primitive{dnnl::reduction(pd), pd};
  });
  execute(p, {{DNNL_ARG_SRC, memory(x_md, x)}, {DNNL_ARG_DST, memory(out_md, out)}});
}

}  // namespace tessera
