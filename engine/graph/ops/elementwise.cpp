// Elementwise ops.
//   unary:      (x) -> f(x), f = attrs.unary
//   unary_grad: (x, dy) -> dy * f'(x) (relu's reads relu's output: y > 0 exactly where x > 0)
//   binary:     (a, b) -> a (op) b with broadcasting
//   cast:       (x) -> x as attrs.dtype
//   dropout:    (x) -> x masked at rate attrs.scalar, mask from (attrs.seed, step);
//               its gradient is the same op on dy
#include <bit>

#include "backends/backend.hpp"
#include "engine/graph/autodiff.hpp"
#include "engine/graph/collective_context.hpp"
#include "engine/graph/op_rules.hpp"

namespace tessera {

ValueId Graph::unary(UnaryOp op, ValueId x) {
  check_floating("unary " + std::string(name(op)), x);
  OpAttrs attrs;
  attrs.unary = op;
  return single(OpKind::unary, {x}, attrs, shape(x), dtype(x));
}

ValueId Graph::binary(BinaryOp op, ValueId a, ValueId b) {
  std::string label = "binary " + std::string(name(op));
  check_same_dtype(label, a, b);
  OpAttrs attrs;
  attrs.binary = op;
  return single(OpKind::binary, {a, b}, attrs, binary_output_shape(shape(a), shape(b), label), dtype(a));
}

ValueId Graph::scale(ValueId x, double factor) { return mul(x, fill(Shape{}, factor, dtype(x))); }

ValueId Graph::cast(ValueId x, DType to) {
  if (dtype(x) == to) return x;
  ValueId root = x;  // a view's bytes are its input's
  while (value(root).producer >= 0 && op_info(node(value(root).producer).kind).view)
    root = node(value(root).producer).inputs[0];
  const bool computed = value(root).producer >= 0 && !op_info(node(value(root).producer).kind).bound;
  if (computed)
    if (auto made = casts_.find({x, to}); made != casts_.end()) return made->second;
  OpAttrs attrs;
  attrs.dtype = to;
  const ValueId cast = single(OpKind::cast, {x}, attrs, shape(x), to);
  if (computed) casts_[{x, to}] = cast;
  return cast;
}

ValueId Graph::dropout(ValueId x, float rate, std::uint64_t seed) {
  check_floating("dropout", x);
  if (!(rate >= 0.0f && rate < 1.0f)) throw Error("dropout: rate must lie in [0, 1), got " + std::to_string(rate));
  if (rate == 0.0f) return x;
  OpAttrs attrs;
  attrs.scalar = rate;
  attrs.seed = seed;
  return single(OpKind::dropout, {x}, attrs, shape(x), dtype(x));
}

namespace {

std::vector<ValueId> unary_grads(Graph& g, const Node& n, const std::vector<ValueId>& dys) {
  // relu's mask reads its output (y > 0 exactly where x > 0), so that nothing
  // else holds on to x and the executor can fuse the relu into the matmul
  // that produces x (fusion.hpp).
  ValueId at = n.attrs.unary == UnaryOp::relu ? n.outputs[0] : n.inputs[0];
  return {emit(g, OpKind::unary_grad, {at, dys[0]}, n.attrs, g.shape(n.inputs[0]), g.dtype(dys[0]))};
}

std::vector<ValueId> binary_grads(Graph& g, const Node& n, const std::vector<ValueId>& dys) {
  ValueId a = n.inputs[0], b = n.inputs[1], dy = dys[0];
  const Shape sa = g.shape(a), sb = g.shape(b);
  switch (n.attrs.binary) {
    case BinaryOp::add:
      return {unbroadcast(g, dy, sa), unbroadcast(g, dy, sb)};
    case BinaryOp::sub:
      return {unbroadcast(g, dy, sa), unbroadcast(g, g.unary(UnaryOp::neg, dy), sb)};
    case BinaryOp::mul:
      return {unbroadcast(g, g.mul(dy, b), sa), unbroadcast(g, g.mul(dy, a), sb)};
    case BinaryOp::div: {
      ValueId da = g.div(dy, b);  // d(a/b)/db = -(a/b)/b = -out/b
      return {unbroadcast(g, da, sa), unbroadcast(g, g.unary(UnaryOp::neg, g.mul(da, n.outputs[0])), sb)};
    }
    case BinaryOp::max:
    case BinaryOp::min: {
      // The gradient goes to a where a wins strictly (relu'(a - b) for max),
      // else to b; ties go to b.
      ValueId margin = n.attrs.binary == BinaryOp::max ? g.sub(a, b) : g.sub(b, a);
      OpAttrs attrs;
      attrs.unary = UnaryOp::relu;
      ValueId dy_full = g.broadcast_to(dy, g.shape(margin));
      ValueId da = emit(g, OpKind::unary_grad, {margin, dy_full}, attrs, g.shape(margin), g.dtype(dy));
      return {unbroadcast(g, da, sa), unbroadcast(g, g.sub(dy_full, da), sb)};
    }
    case BinaryOp::equal:
    case BinaryOp::greater:
      return {kNoGradient, kNoGradient};  // a mask: zero almost everywhere
  }
  return {kNoGradient, kNoGradient};
}

void run_dropout(NodeRun& r) {
  const OpAttrs& at = r.node.attrs;
  // Each step reads its own window of the mask stream: 2^40 positions a step.
  auto step = static_cast<std::uint64_t>(r.update_step > 0 ? r.update_step : r.runs + 1);
  std::uint64_t offset = step << 40;
  // A partitioned graph's block of rows: its first element's global index.
  if (at.mesh_axes != 0)
    offset += static_cast<std::uint64_t>(r.spmd().coordinate(std::countr_zero(at.mesh_axes)) * r.out(0).numel());
  r.backend.dropout(r.in(0), r.out(0), static_cast<float>(at.scalar), at.seed, offset);
}

ShardingRule binary_sharding(const Graph& g, const Node& node) {
  switch (node.attrs.binary) {
    case BinaryOp::add:
    case BinaryOp::sub:
      return elementwise_rule(g, node, {}, /*additive=*/true);
    case BinaryOp::mul:
      return elementwise_rule(g, node, {true, true});
    case BinaryOp::div:
      return elementwise_rule(g, node, {true, false});
    default:
      return elementwise_rule(g, node, {});
  }
}

// The mask is drawn by global element index: a block of rows (dimension 0)
// knows its offset (the run rule adds it), other splits are gathered.
ShardingRule dropout_sharding(const Graph& g, const Node& node) {
  ShardingRule rule = elementwise_rule(g, node, {true});
  auto& x = rule.roles[0];
  if (x.empty()) return rule;
  std::fill(x.begin() + 1, x.end(), DimRole{});
  rule.block_axis = DimRef{.result = true, .index = 0, .dim = 0};
  return rule;
}

}  // namespace

void ops::add_elementwise_rules(OpRuleTable& t) {
  entry(t, OpKind::unary) = {unary_grads, [](NodeRun& r) { r.backend.unary(r.node.attrs.unary, r.in(0), r.fused_out()); },
                             [](const Graph& g, const Node& n) { return elementwise_rule(g, n, {n.attrs.unary == UnaryOp::neg}); }};
  entry(t, OpKind::unary_grad) = {
      nullptr, [](NodeRun& r) { r.backend.unary_backward(r.node.attrs.unary, r.in(0), r.in(1), r.out(0)); },
      [](const Graph& g, const Node& n) { return elementwise_rule(g, n, {false, true}); }};  // dy * f'(x): linear in dy
  entry(t, OpKind::binary) = {
      binary_grads, [](NodeRun& r) { r.backend.binary(r.node.attrs.binary, r.in(0), r.in(1), r.out(0)); }, binary_sharding};
  entry(t, OpKind::cast) = {
      [](Graph& g, const Node& n, const std::vector<ValueId>& dys) -> std::vector<ValueId> {
        return {g.cast(dys[0], g.dtype(n.inputs[0]))};
      },
      [](NodeRun& r) { r.backend.cast(r.in(0), r.out(0)); },
      [](const Graph& g, const Node& n) {
        // Linear only where exact (to a wider floating type): rounding each
        // addend of a partial sum to bf16 is not rounding their sum.
        const DType from = g.dtype(n.inputs[0]), to = n.attrs.dtype;
        return elementwise_rule(g, n, {from == to || (is_floating(from) && is_floating(to) && dtype_size(to) > dtype_size(from))});
      }};
  entry(t, OpKind::dropout) = {
      [](Graph& g, const Node& n, const std::vector<ValueId>& dys) -> std::vector<ValueId> {
        return {emit(g, OpKind::dropout, {dys[0]}, n.attrs, g.shape(dys[0]), g.dtype(dys[0]))};  // the same mask
      },
      run_dropout, dropout_sharding};
}

}  // namespace tessera
