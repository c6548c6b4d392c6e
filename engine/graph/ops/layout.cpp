// Ops that move elements without computing.
//   reshape:   (x) -> the same elements as attrs.shape (a view, no copy)
//   transpose: (x) -> x with axes permuted by attrs.axes
//   concat:    (x0, x1, ...) -> joined along attrs.axis
//   slice:     (x) -> x[attrs.scalar : + attrs.shape[axis]] along attrs.axis
#include "backends/backend.hpp"
#include "engine/graph/op_rules.hpp"

namespace tessera {

ValueId Graph::reshape(ValueId x, const Shape& target) {
  if (target.numel() != shape(x).numel())
    throw ShapeError("reshape: cannot view " + describe(x) + " as " + target.str() + " (" +
                     std::to_string(shape(x).numel()) + " vs " + std::to_string(target.numel()) + " elements)");
  if (target == shape(x)) return x;
  OpAttrs attrs;
  attrs.shape = target;
  return single(OpKind::reshape, {x}, attrs, target, dtype(x));
}

ValueId Graph::transpose(ValueId x, const std::vector<int>& perm) {
  OpAttrs attrs;
  attrs.axes = perm;
  return single(OpKind::transpose, {x}, attrs, transpose_output_shape(shape(x), perm), dtype(x));
}

ValueId Graph::concat(const std::vector<ValueId>& xs, int axis) {
  if (xs.empty()) throw ShapeError("concat: no inputs");
  if (xs.size() == 1) return xs[0];
  Shape first = shape(xs[0]);
  int a = first.normalize_axis(axis);
  auto dims = first.dims();
  dims[a] = 0;
  for (ValueId x : xs) {
    check_same_dtype("concat", xs[0], x);
    Shape s = shape(x);
    bool ok = s.rank() == first.rank();
    for (int i = 0; ok && i < s.rank(); ++i) ok = i == a || s[i] == first[i];
    if (!ok) throw ShapeError("concat: " + describe(xs[0]) + " and " + describe(x) + " differ outside axis " + std::to_string(a));
    dims[a] += s[a];
  }
  OpAttrs attrs;
  attrs.axis = a;
  return single(OpKind::concat, xs, attrs, Shape(dims), dtype(xs[0]));
}

ValueId Graph::slice(ValueId x, int axis, std::int64_t start, std::int64_t length) {
  Shape s = shape(x);
  int a = s.normalize_axis(axis);
  if (start < 0 || length < 0 || start + length > s[a])
    throw ShapeError("slice: [" + std::to_string(start) + ", " + std::to_string(start + length) +
                     ") is outside axis " + std::to_string(a) + " of " + describe(x));
  if (start == 0 && length == s[a]) return x;
  auto dims = s.dims();
  dims[a] = length;
  OpAttrs attrs;
  attrs.axis = a;
  attrs.scalar = static_cast<double>(start);
  attrs.shape = Shape(dims);
  return single(OpKind::slice, {x}, attrs, attrs.shape, dtype(x));
}

namespace {

std::vector<ValueId> transpose_grads(Graph& g, const Node& n, const std::vector<ValueId>& dys) {
  const std::vector<int>& perm = n.attrs.axes;
  std::vector<int> inverse(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i) inverse[static_cast<std::size_t>(perm[i])] = static_cast<int>(i);
  return {g.transpose(dys[0], inverse)};
}

std::vector<ValueId> concat_grads(Graph& g, const Node& n, const std::vector<ValueId>& dys) {
  std::vector<ValueId> grads;
  std::int64_t start = 0;
  for (ValueId x : n.inputs) {
    std::int64_t length = g.shape(x)[n.attrs.axis];
    grads.push_back(g.slice(dys[0], n.attrs.axis, start, length));
    start += length;
  }
  return grads;
}

// The adjoint places dy back between zeros.
std::vector<ValueId> slice_grads(Graph& g, const Node& n, const std::vector<ValueId>& dys) {
  const int axis = n.attrs.axis;
  const ValueId dy = dys[0];
  const Shape full = g.shape(n.inputs[0]);
  const auto start = static_cast<std::int64_t>(n.attrs.scalar);
  auto zeros = [&](std::int64_t length) {
    Shape z = full;
    z[axis] = length;
    return g.fill(z, 0.0, g.dtype(dy));
  };
  std::vector<ValueId> parts;
  if (start > 0) parts.push_back(zeros(start));
  parts.push_back(dy);
  const std::int64_t after = full[axis] - start - g.shape(dy)[axis];
  if (after > 0) parts.push_back(zeros(after));
  return {g.concat(parts, axis)};
}

void run_concat(NodeRun& r) {
  std::vector<Tensor> inputs;  // a small vector of handles; no tensor data moves
  for (ValueId v : r.node.inputs) inputs.push_back(r.values[static_cast<std::size_t>(v)]);
  r.backend.concat(inputs, r.out(0), r.node.attrs.axis);
}

ShardingRule transpose_sharding(const Graph&, const Node& node) {  // operand dimension axes[i] is result dimension i
  std::vector<DimRole> x(node.attrs.axes.size());
  for (std::size_t i = 0; i < node.attrs.axes.size(); ++i)
    x[static_cast<std::size_t>(node.attrs.axes[i])] = {DimRole::result, static_cast<int>(i)};
  return contraction_rule({std::move(x)}, 0, {true});
}

}  // namespace

void ops::add_layout_rules(OpRuleTable& t) {
  entry(t, OpKind::reshape) = {
      [](Graph& g, const Node& n, const std::vector<ValueId>& dys) -> std::vector<ValueId> {
        return {g.reshape(dys[0], g.shape(n.inputs[0]))};
      },
      // A view of the input's storage: nothing moves.
      [](NodeRun& r) { r.set_out(0, r.in(0).reshape(r.node.attrs.shape)); },
      [](const Graph&, const Node&) {
        ShardingRule rule;
        rule.form = ShardingRule::Form::reshape;
        rule.linear = {true};
        return rule;
      }};
  entry(t, OpKind::transpose) = {
      transpose_grads, [](NodeRun& r) { r.backend.transpose(r.in(0), r.out(0), r.node.attrs.axes); }, transpose_sharding};
  entry(t, OpKind::concat) = {concat_grads, run_concat, [](const Graph& g, const Node& n) {
                                return elementwise_rule(g, n, {}, /*additive=*/true, {n.attrs.axis});
                              }};
  entry(t, OpKind::slice) = {
      slice_grads,
      [](NodeRun& r) {
        r.backend.slice(r.in(0), r.out(0), r.node.attrs.axis, static_cast<std::int64_t>(r.node.attrs.scalar));
      },
      [](const Graph& g, const Node& n) { return elementwise_rule(g, n, {true}, false, {n.attrs.axis}); }};
}

}  // namespace tessera
