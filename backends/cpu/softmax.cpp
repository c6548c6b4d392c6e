// Softmax and log-softmax over any axis, and their backward from the output y,
// on oneDNN's softmax_v2 primitives.
//
// The tensor is viewed as [outer, n, inner] with the softmax over the middle
// axis: the result is the same as over the original axis, and shapes that
// differ only outside the axis share a primitive.
#include "backends/cpu/cpu_backend.hpp"

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

}  // namespace

void CpuBackend::run_softmax(const Tensor& x, const Tensor& y, int axis, bool log) {
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
