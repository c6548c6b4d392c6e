// Normalisations over an axis, and their gradients.
//   softmax:         (x) -> softmax (or log-softmax when attrs.log) over attrs.axis,
//                    or with attrs.causal over the last axis of [..., queries, keys] that sees no later key
//   softmax_grad:    (y, dy) -> dx
//   layer_norm:      (x, gamma, beta) -> (y, mean, rstd) over the last axis
//   layer_norm_grad: (x, gamma, mean, rstd, dy) -> (dx, dgamma, dbeta)
#include "backends/backend.hpp"
#include "engine/graph/op_rules.hpp"

namespace tessera {

ValueId Graph::softmax(ValueId x, int axis, bool log) {
  check_floating(log ? "log_softmax" : "softmax", x);
  OpAttrs attrs;
  attrs.axis = shape(x).normalize_axis(axis);
  attrs.log = log;
  return single(OpKind::softmax, {x}, attrs, shape(x), dtype(x));
}

ValueId Graph::causal_softmax(ValueId x) {
  check_floating("causal_softmax", x);
  const Shape& s = shape(x);
  if (s.rank() < 2 || s[s.rank() - 2] > s[s.rank() - 1])
    throw ShapeError("causal_softmax: x must be [..., queries, keys] with queries <= keys, got " + describe(x));
  OpAttrs attrs;
  attrs.axis = s.rank() - 1;
  attrs.causal = true;
  return single(OpKind::softmax, {x}, attrs, s, dtype(x));
}

std::vector<ValueId> Graph::layer_norm(ValueId x, ValueId gamma, ValueId beta, float epsilon) {
  const Shape& xs = shape(x);
  if (xs.rank() < 1) throw ShapeError("layer_norm: x must have rank >= 1, got " + describe(x));
  Shape features{xs[xs.rank() - 1]};
  if (shape(gamma) != features || shape(beta) != features)
    throw ShapeError("layer_norm: gamma " + describe(gamma) + " and beta " + describe(beta) + " must both be " +
                     features.str() + " for x " + describe(x));
  check_same_dtype("layer_norm", x, gamma);
  check_same_dtype("layer_norm", x, beta);
  OpAttrs attrs;
  attrs.epsilon = epsilon;
  Shape rows{xs.rows()};
  NodeId n = add_node(OpKind::layer_norm, {x, gamma, beta}, attrs, {{xs, dtype(x)}, {rows, DType::f32}, {rows, DType::f32}});
  return node(n).outputs;
}

namespace {

std::vector<ValueId> layer_norm_grads(Graph& g, const Node& n, const std::vector<ValueId>& dys) {
  if (dys[1] != kNoGradient || dys[2] != kNoGradient)
    throw GraphError("layer_norm: gradients through its mean and rstd outputs are not supported");
  const Shape gs = g.shape(n.inputs[1]);
  const DType dtype = g.dtype(dys[0]);
  NodeId grad = g.add_node(OpKind::layer_norm_grad, {n.inputs[0], n.inputs[1], n.outputs[1], n.outputs[2], dys[0]},
                           n.attrs, {{g.shape(n.inputs[0]), dtype}, {gs, dtype}, {gs, dtype}});
  return g.node(grad).outputs;
}

// Softmax (and its gradient) over a split dimension need not gather it: the
// max and the sum over that dimension are reduced across the split instead
// (Megatron's vocabulary-parallel cross-entropy: the logits of a
// column-parallel head are never gathered).
ValueId softmax_over_split(Graph& l, const Node& node, const std::vector<ValueId>& inputs, const AcrossSplit& across) {
  const int axis = node.attrs.axis;
  auto over_axis = [&](ReduceOp op, ValueId v) { return l.reduce(op, v, {axis}, /*keepdims=*/true); };
  const ValueId x = inputs[0];
  if (node.kind == OpKind::softmax) {
    const ValueId shifted = l.sub(x, across(over_axis(ReduceOp::max, x), ReduceOp::max));
    const ValueId e = l.unary(UnaryOp::exp, shifted);
    const ValueId sum = across(over_axis(ReduceOp::sum, e), ReduceOp::sum);
    return node.attrs.log ? l.sub(shifted, l.unary(UnaryOp::log, sum)) : l.div(e, sum);
  }
  const ValueId dy = inputs[1];  // (y, dy): the gradient needs one sum over the split dimension
  if (node.attrs.log)            // dx = dy - exp(y) * sum(dy)
    return l.sub(dy, l.mul(l.unary(UnaryOp::exp, x), across(over_axis(ReduceOp::sum, dy), ReduceOp::sum)));
  return l.mul(x, l.sub(dy, across(over_axis(ReduceOp::sum, l.mul(dy, x)), ReduceOp::sum)));  // dx = y * (dy - sum(dy * y))
}

// Elsewhere the axis is whole; softmax_grad is linear in dy. A causal
// softmax keeps its queries whole too (a row's mask follows from its index),
// and its keys: it is never expanded over a split.
ShardingRule softmax_sharding(const Graph& g, const Node& node) {
  const std::vector<bool> linear =
      node.kind == OpKind::softmax_grad ? std::vector<bool>{false, true} : std::vector<bool>{};
  if (node.attrs.causal) return elementwise_rule(g, node, linear, false, {node.attrs.axis - 1, node.attrs.axis});
  ShardingRule rule = elementwise_rule(g, node, linear, false, {node.attrs.axis});
  rule.split_expansion = softmax_over_split;
  rule.split_axis = node.attrs.axis;
  return rule;
}

// Rows may be split along the first dimension (mean and rstd, one per row,
// are split alike). The gradient is linear in dy; dgamma and dbeta sum over
// rows, so split rows make partial sums.
ShardingRule layer_norm_sharding(const Graph&, const Node& node) {
  using Part = ShardingRule::RowPart;
  ShardingRule rule;
  rule.form = ShardingRule::Form::rows;
  if (node.kind == OpKind::layer_norm) {  // (x, gamma, beta) -> (y, mean, rstd)
    rule.operand_parts = {Part::block, Part::per_feature, Part::per_feature};
    rule.result_parts = {Part::block, Part::per_row, Part::per_row};
  } else {  // (x, gamma, mean, rstd, dy) -> (dx, dgamma, dbeta)
    rule.linear = {false, false, false, false, true};
    rule.operand_parts = {Part::block, Part::per_feature, Part::per_row, Part::per_row, Part::block};
    rule.result_parts = {Part::block, Part::per_feature_sum, Part::per_feature_sum};
  }
  return rule;
}

}  // namespace

void ops::add_normalization_rules(OpRuleTable& t) {
  entry(t, OpKind::softmax) = {
      [](Graph& g, const Node& n, const std::vector<ValueId>& dys) -> std::vector<ValueId> {
        return {emit(g, OpKind::softmax_grad, {n.outputs[0], dys[0]}, n.attrs, g.shape(dys[0]), g.dtype(dys[0]))};
      },
      [](NodeRun& r) { r.backend.softmax(r.in(0), r.out(0), r.node.attrs.axis, r.node.attrs.log, r.node.attrs.causal); },
      softmax_sharding};
  entry(t, OpKind::softmax_grad) = {
      nullptr,
      [](NodeRun& r) { r.backend.softmax_backward(r.in(0), r.in(1), r.out(0), r.node.attrs.axis, r.node.attrs.log); },
      softmax_sharding};
  entry(t, OpKind::layer_norm) = {layer_norm_grads,
                                  [](NodeRun& r) {
                                    r.backend.layer_norm(r.in(0), r.in(1), r.in(2), r.fused_out(), r.out(1), r.out(2),
                                                         r.node.attrs.epsilon);
                                  },
                                  layer_norm_sharding};
  entry(t, OpKind::layer_norm_grad) = {
      nullptr,
      [](NodeRun& r) {
        r.backend.layer_norm_backward(r.in(0), r.in(1), r.in(2), r.in(3), r.in(4), r.out(0), r.out(1), r.out(2));
      },
      layer_norm_sharding};
}

}  // namespace tessera
