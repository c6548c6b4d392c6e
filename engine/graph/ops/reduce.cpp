// Reductions and their adjoint.
//   reduce:       (x) -> reduced over attrs.axes, keeping the rank (the builder reshapes away the axes)
//   broadcast_to: (x) -> x broadcast to attrs.shape
#include "backends/backend.hpp"
#include "engine/graph/autodiff.hpp"
#include "engine/graph/op_rules.hpp"

namespace tessera {

ValueId Graph::reduce(ReduceOp op, ValueId x, const std::vector<int>& axes, bool keepdims) {
  std::string label = "reduce " + std::string(name(op));
  check_floating(label, x);
  OpAttrs attrs;
  attrs.reduce = op;
  attrs.axes = axes;
  Shape kept = reduce_output_shape(shape(x), axes, label);
  ValueId out = single(OpKind::reduce, {x}, attrs, kept, dtype(x));
  if (keepdims) return out;
  const Shape& in = shape(x);
  std::vector<bool> reduced(static_cast<std::size_t>(in.rank()), false);
  for (int a : axes) reduced[in.normalize_axis(a)] = true;
  std::vector<std::int64_t> dims;
  for (int i = 0; i < in.rank(); ++i)
    if (!reduced[i]) dims.push_back(in[i]);
  return reshape(out, Shape(dims));
}

ValueId Graph::broadcast_to(ValueId x, const Shape& target) {
  auto b = broadcast_shapes(shape(x), target);
  if (!b || *b != target) throw ShapeError("broadcast_to: " + describe(x) + " does not broadcast to " + target.str());
  OpAttrs attrs;
  attrs.shape = target;
  return single(OpKind::broadcast_to, {x}, attrs, target, dtype(x));
}

namespace {

std::vector<ValueId> reduce_grads(Graph& g, const Node& n, const std::vector<ValueId>& dys) {
  ValueId x = n.inputs[0], dy = dys[0];
  const Shape xs = g.shape(x);
  ValueId dx = g.broadcast_to(dy, xs);
  if (n.attrs.reduce == ReduceOp::max) {
    // The gradient goes to the maxima, shared equally between ties (as JAX does).
    ValueId is_max = g.binary(BinaryOp::equal, x, g.broadcast_to(n.outputs[0], xs));
    ValueId ties = g.reduce(ReduceOp::sum, is_max, n.attrs.axes, /*keepdims=*/true);
    return {g.mul(dx, g.div(is_max, g.broadcast_to(ties, xs)))};
  }
  if (n.attrs.reduce == ReduceOp::mean)
    dx = g.scale(dx, static_cast<double>(g.shape(dy).numel()) / static_cast<double>(xs.numel()));
  return {dx};
}

// Sum and mean over split dimensions give partial sums (a mean rescaled by
// the split); max needs whole dimensions. The result keeps the rank.
ShardingRule reduce_sharding(const Graph& g, const Node& node) {
  const Shape xs = g.shape(node.inputs[0]);
  const bool is_max = node.attrs.reduce == ReduceOp::max;
  std::vector<DimRole> x(static_cast<std::size_t>(xs.rank()));
  for (int d = 0; d < xs.rank(); ++d) x[static_cast<std::size_t>(d)] = {DimRole::result, d};
  int summed = 0;
  for (int axis : node.attrs.axes) {
    DimRole& role = x[static_cast<std::size_t>(xs.normalize_axis(axis))];
    role = is_max ? DimRole{} : DimRole{DimRole::summed, summed++};
  }
  ShardingRule rule = contraction_rule({std::move(x)}, summed, {!is_max});
  rule.mean = node.attrs.reduce == ReduceOp::mean;
  return rule;
}

}  // namespace

void ops::add_reduce_rules(OpRuleTable& t) {
  entry(t, OpKind::reduce) = {
      reduce_grads, [](NodeRun& r) { r.backend.reduce(r.node.attrs.reduce, r.in(0), r.out(0)); }, reduce_sharding};
  entry(t, OpKind::broadcast_to) = {
      [](Graph& g, const Node& n, const std::vector<ValueId>& dys) -> std::vector<ValueId> {
        return {unbroadcast(g, dys[0], g.shape(n.inputs[0]))};
      },
      [](NodeRun& r) { r.backend.broadcast_to(r.in(0), r.out(0)); },
      [](const Graph& g, const Node& n) { return elementwise_rule(g, n, {true}); }};
}

}  // namespace tessera
