// Normalisations over an axis, and their gradients.
//   softmax:         (x) -> softmax (or log-softmax when attrs.log) over attrs.axis
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

}  // namespace

void ops::add_normalization_rules(OpRuleTable& t) {
  entry(t, OpKind::softmax) = {
      [](Graph& g, const Node& n, const std::vector<ValueId>& dys) -> std::vector<ValueId> {
        return {emit(g, OpKind::softmax_grad, {n.outputs[0], dys[0]}, n.attrs, g.shape(dys[0]), g.dtype(dys[0]))};
      },
      [](NodeRun& r) { r.backend.softmax(r.in(0), r.out(0), r.node.attrs.axis, r.node.attrs.log); }};
  entry(t, OpKind::softmax_grad).run = [](NodeRun& r) {
    r.backend.softmax_backward(r.in(0), r.in(1), r.out(0), r.node.attrs.axis, r.node.attrs.log);
  };
  entry(t, OpKind::layer_norm) = {layer_norm_grads, [](NodeRun& r) {
                                    r.backend.layer_norm(r.in(0), r.in(1), r.in(2), r.out(0), r.out(1), r.out(2),
                                                         r.node.attrs.epsilon);
                                  }};
  entry(t, OpKind::layer_norm_grad).run = [](NodeRun& r) {
    r.backend.layer_norm_backward(r.in(0), r.in(1), r.in(2), r.in(3), r.in(4), r.out(0), r.out(1), r.out(2));
  };
}

}  // namespace tessera
