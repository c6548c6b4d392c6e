// matmul: (a, b) -> alpha * op(a) @ op(b), batched over leading axes (MatmulArgs).
#include <functional>
#include <numeric>

#include "backends/backend.hpp"
#include "engine/graph/autodiff.hpp"
#include "engine/graph/op_rules.hpp"

namespace tessera {

ValueId Graph::matmul(ValueId a, ValueId b, const MatmulArgs& args) {
  check_same_dtype("matmul", a, b);
  check_floating("matmul", a);
  // A bias add and activation after the f32 product stay fusable into the
  // matmul (fusion.hpp), with no cast between them.
  if (dtype(a) == DType::f32 && matmul_dtype_ != DType::f32)
    return matmul(cast(a, matmul_dtype_), cast(b, matmul_dtype_), args, DType::f32);
  return matmul(a, b, args, dtype(a));
}

ValueId Graph::matmul(ValueId a, ValueId b, const MatmulArgs& args, DType out) {
  check_same_dtype("matmul", a, b);
  check_floating("matmul", a);
  if (out != dtype(a) && !(dtype(a) == DType::bf16 && out == DType::f32))
    throw DTypeError("matmul: the product of " + describe(a) + " and " + describe(b) + " is kept in " +
                     std::string(dtype_name(dtype(a))) + (dtype(a) == DType::bf16 ? " or f32" : "") + ", not " +
                     std::string(dtype_name(out)));
  OpAttrs attrs;
  attrs.matmul = args;
  return single(OpKind::matmul, {a, b}, attrs, matmul_output_shape(shape(a), shape(b), args), out);
}

namespace {

// Gradients of a matmul's operands: the four transpose cases, each a matmul,
// then summed over broadcast batch axes.
std::vector<ValueId> matmul_grads(Graph& g, const Node& n, const std::vector<ValueId>& dys) {
  ValueId a = n.inputs[0], b = n.inputs[1], dy = dys[0];
  const MatmulArgs& args = n.attrs.matmul;
  // A mixed product (bf16 operands, f32 out) gets f32 gradients the same way:
  // dy rounded to bf16 once, the gradients' products kept in f32. The casts
  // that made the operands then pass them on as they are.
  const DType kept = g.dtype(n.outputs[0]);
  dy = g.cast(dy, g.dtype(a));
  auto mm = [&](ValueId l, ValueId r, bool tl, bool tr) {
    return g.matmul(l, r, {.transpose_a = tl, .transpose_b = tr, .alpha = args.alpha}, kept);
  };
  bool ta = args.transpose_a, tb = args.transpose_b;
  ValueId da = !ta ? mm(dy, b, false, !tb) : (!tb ? mm(b, dy, false, true) : mm(b, dy, true, true));
  ValueId db;
  const Shape& as = g.shape(a);
  if (g.shape(b).rank() == 2 && as.rank() > 2 && !ta) {
    // A weight shared over batch axes: fold them into the rows, one 2-D matmul.
    // Rows are the product of the leading axes, not numel / last: a last axis can be 0.
    auto rows = [](const Shape& s) {
      return std::accumulate(s.dims().begin(), s.dims().end() - 1, std::int64_t{1}, std::multiplies<>());
    };
    const Shape& ys = g.shape(dy);
    ValueId a2 = g.reshape(a, {rows(as), as[as.rank() - 1]});
    ValueId dy2 = g.reshape(dy, {rows(ys), ys[ys.rank() - 1]});
    db = tb ? mm(dy2, a2, true, false) : mm(a2, dy2, true, false);
  } else {
    db = !tb ? (!ta ? mm(a, dy, true, false) : mm(a, dy, false, false))
             : (!ta ? mm(dy, a, true, false) : mm(dy, a, true, true));
  }
  return {unbroadcast(g, da, g.shape(a)), unbroadcast(g, db, g.shape(b))};
}

void run_matmul(NodeRun& r) {
  MatmulArgs args = r.node.attrs.matmul;
  if (r.epilogue != nullptr) args.activation = r.fused_activation();
  // A fused cast's value may lie in another shape (fusion.hpp): the product's
  // bytes all the same (viewed anew only then: no copy of a Shape per call).
  const Shape& product = r.graph.shape(r.node.outputs[0]);
  Tensor reshaped;
  const Tensor& out = r.fused_out().shape() == product ? r.fused_out() : (reshaped = r.fused_out().reshape(product));
  const Tensor* bias = r.fused_bias();
  const auto f32 = [](const Tensor* t) { return t == nullptr || t->dtype() == DType::f32; };
  if (r.packed_b != nullptr && f32(&r.in(0)) && f32(bias) && f32(&out))  // op(b) packed (Executor::fix_variables)
    return r.backend.matmul_packed(r.in(0), *r.packed_b, bias, out, args);
  if (r.transposed_b != nullptr) {  // b's copy [N, K] (Executor::fix_variables)
    args.transpose_b = !args.transpose_b;
    return r.backend.matmul(r.in(0), *r.transposed_b, bias, out, args);
  }
  r.backend.matmul(r.in(0), r.in(1), bias, out, args);
}

// Batch axes of equal size are the result's, a broadcast one is whole; the
// rows of op(a) and the columns of op(b) are the result's last two, and the
// inner pair is summed.
ShardingRule matmul_sharding(const Graph& g, const Node& node) {
  const Shape out = g.shape(node.outputs[0]);
  const MatmulArgs& args = node.attrs.matmul;
  const int r = out.rank();
  auto roles = [&](const Shape& s, bool transposed, bool is_b) {
    std::vector<DimRole> roles(static_cast<std::size_t>(s.rank()));
    const int shift = r - s.rank();
    for (int d = 0; d < s.rank() - 2; ++d)
      if (s[d] == out[d + shift]) roles[static_cast<std::size_t>(d)] = {DimRole::result, d + shift};
    DimRole row = is_b ? DimRole{DimRole::summed, 0} : DimRole{DimRole::result, r - 2};
    DimRole col = is_b ? DimRole{DimRole::result, r - 1} : DimRole{DimRole::summed, 0};
    if (transposed) std::swap(row, col);
    roles[static_cast<std::size_t>(s.rank() - 2)] = row;
    roles[static_cast<std::size_t>(s.rank() - 1)] = col;
    return roles;
  };
  std::vector<std::vector<DimRole>> operands{roles(g.shape(node.inputs[0]), args.transpose_a, false),
                                             roles(g.shape(node.inputs[1]), args.transpose_b, true)};
  if (args.activation == Activation::none) return contraction_rule(std::move(operands), 1, {true, true});
  // act(sum of partial products) is not the sum of act(partial products):
  // a fused activation needs whole contractions and whole operands.
  for (auto& operand : operands)
    for (auto& role : operand)
      if (role.kind == DimRole::summed) role = {};
  return contraction_rule(std::move(operands), 1, {});
}

std::int64_t matmul_flops(const Graph& g, const Node& node) {
  const Shape a = g.shape(node.inputs[0]), out = g.shape(node.outputs[0]);
  const std::int64_t k = node.attrs.matmul.transpose_a ? a[a.rank() - 2] : a[a.rank() - 1];
  return 2 * out.numel() * k;
}

}  // namespace

void ops::add_matmul_rules(OpRuleTable& t) {
  entry(t, OpKind::matmul) = {matmul_grads, run_matmul, matmul_sharding, matmul_flops};
}

}  // namespace tessera
