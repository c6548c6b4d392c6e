#include "engine/graph/autodiff.hpp"

#include <functional>
#include <numeric>

#include "engine/core/error.hpp"

namespace tessera {
namespace {

constexpr ValueId kNone = -1;

// Appends a node of `kind` with one output of `shape`/`dtype`; returns the output.
ValueId emit(Graph& g, OpKind kind, std::vector<ValueId> inputs, const OpAttrs& attrs,
             const Shape& shape, DType dtype) {
  return g.node(g.add_node(kind, std::move(inputs), attrs, {{shape, dtype}})).outputs[0];
}

// Gradients of a matmul's operands: the four transpose cases, each a matmul,
// then summed over broadcast batch axes.
std::vector<ValueId> matmul_grads(Graph& g, const Node& n, ValueId dy) {
  ValueId a = n.inputs[0], b = n.inputs[1];
  const MatmulArgs& args = n.attrs.matmul;
  auto mm = [&](ValueId l, ValueId r, bool tl, bool tr) {
    return g.matmul(l, r, {.transpose_a = tl, .transpose_b = tr, .alpha = args.alpha});
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

std::vector<ValueId> binary_grads(Graph& g, const Node& n, ValueId dy) {
  ValueId a = n.inputs[0], b = n.inputs[1];
  const Shape& sa = g.shape(a);
  const Shape& sb = g.shape(b);
  switch (n.attrs.binary) {
    case BinaryOp::add:
      return {unbroadcast(g, dy, sa), unbroadcast(g, dy, sb)};
    case BinaryOp::sub:
      return {unbroadcast(g, dy, sa), unbroadcast(g, g.unary(UnaryOp::neg, dy), sb)};
    case BinaryOp::mul:
      return {unbroadcast(g, g.mul(dy, b), sa), unbroadcast(g, g.mul(dy, a), sb)};
    case BinaryOp::div: {
      ValueId da = g.div(dy, b);  // d(a/b)/db = -(a/b)/b = -out/b
      return {unbroadcast(g, da, sa),
              unbroadcast(g, g.unary(UnaryOp::neg, g.mul(da, n.outputs[0])), sb)};
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
      return {kNone, kNone};  // a mask: zero almost everywhere
  }
  return {kNone, kNone};
}

std::vector<ValueId> reduce_grads(Graph& g, const Node& n, ValueId dy) {
  ValueId x = n.inputs[0];
  const Shape& xs = g.shape(x);
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

// Gradients of node `n`'s inputs given the gradients of its outputs
// (kNone where an output has none). Returns one entry per input.
std::vector<ValueId> node_grads(Graph& g, const Node& n, const std::vector<ValueId>& dys) {
  ValueId dy = dys.empty() ? kNone : dys[0];
  const OpAttrs& at = n.attrs;
  auto in = [&](int i) { return n.inputs[static_cast<std::size_t>(i)]; };
  switch (n.kind) {
    case OpKind::input:
    case OpKind::variable:
    case OpKind::fill:
      return {};
    case OpKind::matmul:
      return matmul_grads(g, n, dy);
    case OpKind::conv2d: {
      OpAttrs gx = at, gw = at;
      gx.shape = g.shape(in(0));
      gw.shape = g.shape(in(1));
      return {emit(g, OpKind::conv2d_grad_input, {dy, in(1)}, gx, gx.shape, g.dtype(dy)),
              emit(g, OpKind::conv2d_grad_weight, {in(0), dy}, gw, gw.shape, g.dtype(dy))};
    }
    case OpKind::pool2d:
      return {emit(g, OpKind::pool2d_grad, {in(0), dy}, at, g.shape(in(0)), g.dtype(dy))};
    case OpKind::unary: {
      // relu's mask reads its output (y > 0 exactly where x > 0), so that
      // nothing else holds on to x and the executor can fuse the relu into the
      // matmul that produces x (fusion.hpp).
      ValueId at_value = at.unary == UnaryOp::relu ? n.outputs[0] : in(0);
      return {emit(g, OpKind::unary_grad, {at_value, dy}, at, g.shape(in(0)), g.dtype(dy))};
    }
    case OpKind::binary:
      return binary_grads(g, n, dy);
    case OpKind::reduce:
      return reduce_grads(g, n, dy);
    case OpKind::broadcast_to:
      return {unbroadcast(g, dy, g.shape(in(0)))};
    case OpKind::reshape:
      return {g.reshape(dy, g.shape(in(0)))};
    case OpKind::transpose: {
      std::vector<int> inverse(at.axes.size());
      for (std::size_t i = 0; i < at.axes.size(); ++i) inverse[at.axes[i]] = static_cast<int>(i);
      return {g.transpose(dy, inverse)};
    }
    case OpKind::softmax:
      return {emit(g, OpKind::softmax_grad, {n.outputs[0], dy}, at, g.shape(dy), g.dtype(dy))};
    case OpKind::layer_norm: {
      if (dys[1] != kNone || dys[2] != kNone)
        throw GraphError("layer_norm: gradients through its mean and rstd outputs are not supported");
      const Shape& gs = g.shape(in(1));
      NodeId grad = g.add_node(OpKind::layer_norm_grad, {in(0), in(1), n.outputs[1], n.outputs[2], dy},
                               at, {{g.shape(in(0)), g.dtype(dy)}, {gs, g.dtype(dy)}, {gs, g.dtype(dy)}});
      const auto& outs = g.node(grad).outputs;
      return {outs[0], outs[1], outs[2]};
    }
    case OpKind::embedding: {
      OpAttrs ga = at;
      ga.shape = g.shape(in(0));
      return {emit(g, OpKind::embedding_grad, {in(1), dy}, ga, ga.shape, g.dtype(dy)), kNone};
    }
    case OpKind::cast:
      return {g.cast(dy, g.dtype(in(0)))};
    case OpKind::concat: {
      std::vector<ValueId> grads;
      std::int64_t start = 0;
      for (ValueId x : n.inputs) {
        std::int64_t length = g.shape(x)[at.axis];
        grads.push_back(g.slice(dy, at.axis, start, length));
        start += length;
      }
      return grads;
    }
    case OpKind::slice: {
      // The adjoint places dy back between zeros.
      Shape full = g.shape(in(0));
      auto start = static_cast<std::int64_t>(at.scalar);
      std::vector<ValueId> parts;
      auto zeros = [&](std::int64_t length) {
        Shape z = full;
        z[at.axis] = length;
        return g.fill(z, 0.0, g.dtype(dy));
      };
      if (start > 0) parts.push_back(zeros(start));
      parts.push_back(dy);
      std::int64_t after = full[at.axis] - start - g.shape(dy)[at.axis];
      if (after > 0) parts.push_back(zeros(after));
      return {g.concat(parts, at.axis)};
    }
    case OpKind::dropout:
      return {emit(g, OpKind::dropout, {dy}, at, g.shape(dy), g.dtype(dy))};  // same mask
    case OpKind::one_hot:
      return {kNone};  // its input is integer ids
    default:
      throw GraphError("op '" + std::string(name(n.kind)) +
                       "' has no gradient rule (it is itself part of a backward pass or an update)");
  }
}

}  // namespace

ValueId unbroadcast(Graph& graph, ValueId grad, const Shape& target) {
  const Shape& gs = graph.shape(grad);
  if (gs == target) return grad;
  int shift = gs.rank() - target.rank();
  std::vector<int> axes;
  for (int i = 0; i < gs.rank(); ++i) {
    std::int64_t t = i >= shift ? target[i - shift] : 1;
    if (t == 1 && gs[i] != 1) axes.push_back(i);
  }
  ValueId summed = axes.empty() ? grad : graph.reduce(ReduceOp::sum, grad, axes, /*keepdims=*/true);
  return graph.reshape(summed, target);
}

std::unordered_map<ValueId, ValueId> append_gradients(Graph& graph, ValueId loss,
                                                      const std::vector<ValueId>& wrt) {
  if (graph.shape(loss).numel() != 1)
    throw ShapeError("autodiff: the loss must have one element, got shape " + graph.shape(loss).str());
  if (!is_floating(graph.dtype(loss))) throw DTypeError("autodiff: the loss must be floating point");

  // Values that depend on something in `wrt`: only their producers need rules.
  std::vector<bool> depends(static_cast<std::size_t>(graph.value_count()), false);
  for (ValueId v : wrt) depends[v] = true;
  NodeId last = graph.value(loss).producer;
  for (NodeId n = 0; n <= last; ++n) {
    const Node& node = graph.node(n);
    bool any = false;
    for (ValueId in : node.inputs) any = any || depends[in];
    if (any)
      for (ValueId out : node.outputs) depends[out] = true;
  }

  std::vector<ValueId> grad(static_cast<std::size_t>(graph.value_count()), kNone);
  grad[loss] = graph.fill(graph.shape(loss), 1.0, graph.dtype(loss));
  for (NodeId n = last; n >= 0; --n) {
    Node node = graph.node(n);  // a copy: appending nodes may move the node list
    std::vector<ValueId> dys;
    bool has_grad = false;
    for (ValueId out : node.outputs) {
      dys.push_back(grad[out]);
      has_grad = has_grad || grad[out] != kNone;
    }
    bool inputs_need = false;
    for (ValueId in : node.inputs) inputs_need = inputs_need || depends[in];
    if (!has_grad || !inputs_need) continue;
    auto input_grads = node_grads(graph, node, dys);
    for (std::size_t i = 0; i < input_grads.size(); ++i) {
      ValueId in = node.inputs[i], dx = input_grads[i];
      if (dx == kNone || !depends[in] || !is_floating(graph.dtype(in))) continue;
      grad[in] = grad[in] == kNone ? dx : graph.add(grad[in], dx);
    }
  }

  std::unordered_map<ValueId, ValueId> result;
  for (ValueId v : wrt)
    result[v] = grad[v] != kNone ? grad[v] : graph.fill(graph.shape(v), 0.0, graph.dtype(v));
  return result;
}

}  // namespace tessera
