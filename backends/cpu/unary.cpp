// Elementwise unary ops and their derivatives on oneDNN eltwise primitives.
#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/eltwise_algorithm.hpp"

namespace tessera {

void CpuBackend::run_unary(UnaryOp op, const Tensor& x, const Tensor& y) {
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
