// Matmul on oneDNN: transposes are expressed as strides of the memory
// descriptors (no copy), the bias and activation as a fused bias and eltwise
// post-op, alpha as the output scale.
#include <bit>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/eltwise_algorithm.hpp"

namespace tessera {
namespace {

using dnnl::memory;

// Descriptor of an operand of rank `rank` (leading 1s added for broadcasting),
// optionally viewed transposed in its last two axes.
memory::desc operand_desc(const Tensor& t, int rank, bool transposed) {
  memory::dims stored(static_cast<std::size_t>(rank - t.rank()), 1);
  for (auto d : t.shape().dims()) stored.push_back(d);
  memory::dims strides(stored.size());
  memory::dim stride = 1;
  for (std::size_t i = stored.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= stored[i];
  }
  memory::dims logical = stored;
  if (transposed) {
    std::swap(logical[rank - 2], logical[rank - 1]);
    std::swap(strides[rank - 2], strides[rank - 1]);
  }
  return memory::desc(logical, dnnl_type(t.dtype()), strides);
}

}  // namespace

void CpuBackend::run_matmul(const Tensor& a, const Tensor& b, const Tensor* bias, const Tensor& out,
                            const MatmulArgs& args) {
  // A weight shared over a's batch axes is one 2-D product over all rows
  // (oneDNN's batched kernel with a broadcast weight is slower).
  if (b.rank() == 2 && a.rank() > 2 && !args.transpose_a) {
    std::int64_t k = a.shape()[a.rank() - 1], n = out.shape()[out.rank() - 1], rows = a.shape().rows();
    return run_matmul(a.reshape({rows, k}), b, bias, out.reshape({rows, n}), args);
  }
  int rank = out.rank();
  std::string key = "matmul " + cache_key(a) + (args.transpose_a ? "T" : "") + cache_key(b) +
                    (args.transpose_b ? "T" : "") + (bias ? cache_key(*bias) : "-") +
                    cache_key(out) + std::string(tessera::name(args.activation)) + " " +
                    std::to_string(std::bit_cast<std::uint32_t>(args.alpha));  // exact, unlike %f
  auto a_md = operand_desc(a, rank, args.transpose_a);
  auto b_md = operand_desc(b, rank, args.transpose_b);
  auto out_md = plain_desc(out.shape(), out.dtype());
  memory::dims bias_dims(static_cast<std::size_t>(rank), 1);
  bias_dims.back() = out.shape()[rank - 1];
  auto bias_md = bias ? plain_desc(Shape(bias_dims), bias->dtype()) : memory::desc();
  // oneDNN's output scale would also scale the bias, so with alpha != 1 the
  // bias is added by a binary post-op after the scaling instead.
  bool bias_post_op = bias != nullptr && args.alpha != 1.0f;
  const Primitive& p = primitive(key, [&] {
    auto attr = default_attr();
    dnnl::post_ops ops;
    if (args.alpha != 1.0f) attr.set_output_scales(0, {args.alpha});
    if (bias_post_op) ops.append_binary(dnnl::algorithm::binary_add, bias_md);
    if (args.activation != Activation::none) {
      auto alg = eltwise_algorithm(activation_unary(args.activation));
      ops.append_eltwise(1.0f, alg->algorithm, alg->alpha, alg->beta);
    }
    attr.set_post_ops(ops);
    dnnl::matmul::desc desc = bias && !bias_post_op ? dnnl::matmul::desc(a_md, b_md, bias_md, out_md)
                                                    : dnnl::matmul::desc(a_md, b_md, out_md);
    dnnl::matmul::primitive_desc pd(desc, attr, engine());
    return Primitive{dnnl::matmul(pd), pd};
  });
  std::unordered_map<int, dnnl::memory> margs{{DNNL_ARG_SRC, memory(a_md, a)},
                                         {DNNL_ARG_WEIGHTS, memory(b_md, b)},
                                         {DNNL_ARG_DST, memory(out_md, out)}};
  if (bias_post_op)
    margs.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, memory(bias_md, *bias));
  else if (bias)
    margs.emplace(DNNL_ARG_BIAS, memory(bias_md, *bias));
  execute(p, std::move(margs));
}

}  // namespace tessera
