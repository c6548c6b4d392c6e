// Softmax and log-softmax over any axis, and their backward from the output y,
// on oneDNN's softmax_v2 primitives; the f32 backward over the innermost axis
// in a loop of its own. A causal softmax writes x into y with the masked
// elements at -inf, then runs the primitive on y in place.
//
// The tensor is viewed as [outer, n, inner] with the softmax over the middle
// axis: the result is the same as over the original axis, and shapes that
// differ only outside the axis share a primitive.
#include <algorithm>
#include <cmath>

#include "backends/cpu/parallel_for.hpp"
#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/vector_math.hpp"

namespace tessera {
namespace {

using dnnl::memory;

// The [outer, n, inner] view of `shape` around `axis`.
Shape softmax_view(const Shape& s, int axis) {
  std::int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= s[i];
  for (int i = axis + 1; i < s.rank(); ++i) inner *= s[i];
  return Shape{outer, s[axis], inner};
}

dnnl::algorithm softmax_algorithm(bool log) {
  return log ? dnnl::algorithm::softmax_log : dnnl::algorithm::softmax_accurate;
}

std::string view_key(const Shape& view, DType dtype, bool log) {
  return std::string(log ? "log " : "") + std::string(dtype_name(dtype)) + view.str();
}

// The sum of one row's backward, from y and dy: softmax's sum(dy * y),
// log-softmax's sum(dy). In 16 running partial sums, which vectorise without
// reordering any one of them, then those in order and the tail: the order
// is fixed, so every run repeats its bits.
__attribute__((target_clones("avx512f", "avx2", "default")))
float backward_row_sum(const float* __restrict y, const float* __restrict dy, std::int64_t n, bool log) {
  constexpr std::int64_t kPartials = 16;
  float partial[kPartials] = {};
  const std::int64_t whole = n / kPartials * kPartials;
  for (std::int64_t i = 0; i < whole; i += kPartials)
    for (std::int64_t j = 0; j < kPartials; ++j) partial[j] += log ? dy[i + j] : dy[i + j] * y[i + j];
  float sum = 0.0f;
  for (float p : partial) sum += p;
  for (std::int64_t i = whole; i < n; ++i) sum += log ? dy[i] : dy[i] * y[i];
  return sum;
}

// Softmax's dx = y * (dy - sum). dx may be dy: each element is read before
// it is written.
__attribute__((target_clones("avx512f", "avx2", "default")))
void softmax_dx(const float* __restrict y, const float* dy, float* dx, std::int64_t n, float sum) {
  for (std::int64_t i = 0; i < n; ++i) dx[i] = y[i] * (dy[i] - sum);
}

// Log-softmax's dx = dy - e^y * sum, e^y in vector_math's vectors: the C
// library's expf, one element at a time, made this pass 0.6 ms of the zoo
// GPT's training step on one thread (its loss over [1024, 256] logits). y is
// a log-probability, <= 0, where exp_fit holds; a NaN y gives a NaN dx, as
// expf's would.
struct LogSoftmaxDx {
  float sum;
  template <class V>
  [[gnu::always_inline]] V operator()(V y, V dy) const {
    const V e = vector_math::exp_fit(y);
    return dy - (y == y ? e : y) * sum;
  }
};

[[gnu::target("avx512f,fma")]] void log_softmax_dx_avx512(const float* y, const float* dy, float* dx,
                                                          std::int64_t n, float sum) {
  vector_math::for_vectors<vector_math::F16>(n, LogSoftmaxDx{sum}, dx, y, dy);
}

[[gnu::target("avx2,fma")]] void log_softmax_dx_avx2(const float* y, const float* dy, float* dx, std::int64_t n,
                                                     float sum) {
  vector_math::for_vectors<vector_math::F8>(n, LogSoftmaxDx{sum}, dx, y, dy);
}

void log_softmax_dx_scalar(const float* y, const float* dy, float* dx, std::int64_t n, float sum) {
  for (std::int64_t i = 0; i < n; ++i) dx[i] = dy[i] - std::exp(y[i]) * sum;
}

// dx of one row of n from y and dy. oneDNN 2.6 runs this backward in its
// reference implementation where it has no AVX-512 (ref:any: 6.8 ms a call on
// the zoo GPT's attention weights on a Zen 1, 6x its jitted forward). dx may
// be dy (an in-place backward).
void softmax_backward_row(const float* y, const float* dy, float* dx, std::int64_t n, bool log) {
  static const auto log_softmax_dx = [] {
    const VectorIsa isa = widest_vector_isa();
    return isa == VectorIsa::avx512 ? log_softmax_dx_avx512
           : isa == VectorIsa::avx2 ? log_softmax_dx_avx2
                                    : log_softmax_dx_scalar;
  }();
  const float sum = backward_row_sum(y, dy, n, log);
  if (log) log_softmax_dx(y, dy, dx, n, sum);
  else softmax_dx(y, dy, dx, n, sum);
}

// y = x over [..., m, n], but -inf where key j lies after query i's position
// (j > i + n - m): exp(-inf) = 0, so a softmax of y gives what a mask of
// -inf added to x would. x may be y (an in-place softmax).
void mask_future(const Tensor& x, const Tensor& y) {
  const Shape& s = x.shape();
  const std::int64_t m = s[s.rank() - 2], n = s[s.rank() - 1], rows = s.rows();
  const float* px = x.data<float>();
  float* py = y.data<float>();
  parallel_for(rows, rows * n > 65536, [&](std::int64_t r) {
    const std::int64_t valid = r % m + 1 + n - m;
    if (px != py) std::copy(px + r * n, px + r * n + valid, py + r * n);
    std::fill(py + r * n + valid, py + (r + 1) * n, -INFINITY);
  });
}

}  // namespace

void CpuBackend::run_softmax(const Tensor& x, const Tensor& y, int axis, bool log, bool causal) {
  if (causal) {  // f32 (supports()), over the last axis (Backend::softmax)
    {
      KernelScope scope(threads());
      mask_future(x, y);
    }
    return run_softmax(y, y, axis, log, false);
  }
  Shape view = softmax_view(x.shape(), axis);
  auto md = plain_desc(view, x.dtype());
  const Primitive& p = primitive("softmax " + view_key(view, x.dtype(), log), [&] {
    dnnl::softmax_v2_forward::desc desc(dnnl::prop_kind::forward_training, softmax_algorithm(log),
                                        md, md, 1);
    dnnl::softmax_v2_forward::primitive_desc pd(desc, default_attr(), engine());
    return Primitive{dnnl::softmax_v2_forward(pd), pd};
  });
  execute(p, {{DNNL_ARG_SRC, memory(md, x)}, {DNNL_ARG_DST, memory(md, y)}});
}

void CpuBackend::run_softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx,
                                      int axis, bool log) {
  Shape view = softmax_view(y.shape(), axis);
  if (y.dtype() == DType::f32 && view[2] == 1) {  // rows of view[1] elements, one after another
    KernelScope scope(threads());
    const std::int64_t rows = view[0], n = view[1];
    const float *py = y.data<float>(), *pdy = dy.data<float>();
    float* pdx = dx.data<float>();
    parallel_for(rows, rows * n > 16384,
                 [&](std::int64_t r) { softmax_backward_row(py + r * n, pdy + r * n, pdx + r * n, n, log); });
    return;
  }
  auto md = plain_desc(view, y.dtype());
  const Primitive& p = primitive("softmax_backward " + view_key(view, y.dtype(), log), [&] {
    dnnl::softmax_v2_forward::desc fwd_desc(dnnl::prop_kind::forward_training,
                                            softmax_algorithm(log), md, md, 1);
    dnnl::softmax_v2_forward::primitive_desc hint(fwd_desc, default_attr(), engine());
    dnnl::softmax_v2_backward::desc desc(softmax_algorithm(log), md, md, md, 1);
    dnnl::softmax_v2_backward::primitive_desc pd(desc, default_attr(), engine(), hint);
    return Primitive{dnnl::softmax_v2_backward(pd), pd};
  });
  execute(p, {{DNNL_ARG_DST, memory(md, y)},
              {DNNL_ARG_DIFF_DST, memory(md, dy)},
              {DNNL_ARG_DIFF_SRC, memory(md, dx)}});
}

}  // namespace tessera
