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

// Whether oneDNN has a bf16 matmul for this CPU (2.6: AVX-512 and later).
bool bf16_matmul_native(const dnnl::engine& engine) {
  static const bool native = [&] {
    try {
      memory::desc md({2, 2}, memory::data_type::bf16, memory::format_tag::ab);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(md, md, md), engine);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return native;
}

bool any_bf16(const Tensor& a, const Tensor& b, const Tensor* bias, const Tensor& out) {
  auto is = [](const Tensor& t) { return t.dtype() == DType::bf16; };
  return is(a) || is(b) || is(out) || (bias != nullptr && is(*bias));
}

}  // namespace

void CpuBackend::matmul_widened(const Tensor& a, const Tensor& b, const Tensor* bias, const Tensor& out,
                                const MatmulArgs& args) {
  auto widened = [&](const Tensor& t, const char* role) {
    if (t.dtype() == DType::f32) return t;
    Tensor wide = scratch_tensor(std::string("matmul f32 ") + role, t.shape(), DType::f32);
    run_cast(t, wide);
    return wide;
  };
  Tensor wide_bias = bias != nullptr ? widened(*bias, "bias") : Tensor();
  Tensor wide_out = out.dtype() == DType::f32 ? out : scratch_tensor("matmul f32 out", out.shape(), DType::f32);
  run_matmul(widened(a, "a"), widened(b, "b"), bias != nullptr ? &wide_bias : nullptr, wide_out, args);
  if (out.dtype() != DType::f32) run_cast(wide_out, out);
}

void CpuBackend::run_matmul(const Tensor& a, const Tensor& b, const Tensor* bias, const Tensor& out,
                            const MatmulArgs& args) {
  // A weight shared over a's batch axes is one 2-D product over all rows
  // (oneDNN's batched kernel with a broadcast weight is slower).
  if (b.rank() == 2 && a.rank() > 2 && !args.transpose_a) {
    std::int64_t k = a.shape()[a.rank() - 1], n = out.shape()[out.rank() - 1], rows = a.shape().rows();
    return run_matmul(a.reshape({rows, k}), b, bias, out.reshape({rows, n}), args);
  }
  if (any_bf16(a, b, bias, out) && !bf16_matmul_native(engine())) return matmul_widened(a, b, bias, out, args);
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
