// Sum, mean and max reductions on oneDNN's reduction primitive (keepdims form).
#include "backends/cpu/cpu_backend.hpp"

namespace tessera {

void CpuBackend::run_reduce(ReduceOp op, const Tensor& x, const Tensor& out) {
  if (x.shape() == out.shape()) return run_copy(x, out);
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
