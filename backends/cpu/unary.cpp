// Elementwise unary ops and their derivatives on oneDNN eltwise primitives,
// GELU's erf form on backends/cpu/gelu.hpp's where that is faster.
#include <initializer_list>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/eltwise_algorithm.hpp"
#include "backends/cpu/gelu.hpp"

namespace tessera {
namespace {

bool in_house(UnaryOp op, std::initializer_list<const Tensor*> tensors) {
  if (op != UnaryOp::gelu_erf || widest_vector_isa() == VectorIsa::scalar) return false;
  for (const Tensor* t : tensors)
    if (t->dtype() != DType::f32) return false;
  return true;
}

}  // namespace

bool matmul_gelu_in_house() {
  static const bool in_house = onednn_runs_avx2() && widest_vector_isa() != VectorIsa::scalar;
  return in_house;
}

void CpuBackend::run_unary(UnaryOp op, const Tensor& x, const Tensor& y) {
  if (y.dtype() != x.dtype()) {  // f32 x, bf16 y
    if (in_house(op, {&x})) {
      KernelScope scope(threads());
      return gelu_erf_to_bf16(x.data<float>(), y.data<bf16>(), x.numel());
    }
    return rounded_from_f32("unary f32 out", y, [&](const Tensor& wide) { run_unary(op, x, wide); });
  }
  if (in_house(op, {&x, &y})) {
    KernelScope scope(threads());
    return gelu_erf(x.data<float>(), y.data<float>(), x.numel());
  }
  auto alg = eltwise_algorithm(op);
  auto md = plain_desc(Shape{x.numel()}, x.dtype());
  const Primitive& p = primitive("unary " + std::string(tessera::name(op)) + cache_key(x), [&] {
    dnnl::eltwise_forward::desc desc(dnnl::prop_kind::forward_training, alg->algorithm, md,
                                     alg->alpha, alg->beta);
    dnnl::eltwise_forward::primitive_desc pd(desc, default_attr(), engine());
    return Primitive{dnnl::eltwise_forward(pd), pd};
  });
  execute(p, {{DNNL_ARG_SRC, memory(md, x)}, {DNNL_ARG_DST, memory(md, y)}});
}

void CpuBackend::run_unary_backward(UnaryOp op, const Tensor& x, const Tensor& dy,
                                    const Tensor& dx) {
  if (in_house(op, {&x, &dy, &dx})) {
    KernelScope scope(threads());
    return gelu_erf_backward(x.data<float>(), dy.data<float>(), dx.data<float>(), x.numel());
  }
  auto alg = eltwise_algorithm(op);
  auto md = plain_desc(Shape{x.numel()}, x.dtype());
  const Primitive& p = primitive("unary_backward " + std::string(tessera::name(op)) + cache_key(x), [&] {
    dnnl::eltwise_forward::desc fwd_desc(dnnl::prop_kind::forward_training, alg->algorithm, md,
                                         alg->alpha, alg->beta);
    dnnl::eltwise_forward::primitive_desc fwd_pd(fwd_desc, default_attr(), engine());
    dnnl::eltwise_backward::desc desc(alg->algorithm, md, md, alg->alpha, alg->beta);
    dnnl::eltwise_backward::primitive_desc pd(desc, default_attr(), engine(), fwd_pd);
    return Primitive{dnnl::eltwise_backward(pd), pd};
  });
  execute(p, {{DNNL_ARG_SRC, memory(md, x)},
              {DNNL_ARG_DIFF_DST, memory(md, dy)},
              {DNNL_ARG_DIFF_SRC, memory(md, dx)}});
}

}  // namespace tessera
