#include "engine/graph/autodiff.hpp"

#include "engine/core/error.hpp"
#include "engine/graph/op_rules.hpp"

namespace tessera {

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

  std::vector<ValueId> grad(static_cast<std::size_t>(graph.value_count()), kNoGradient);
  grad[loss] = graph.fill(graph.shape(loss), 1.0, graph.dtype(loss));
  for (NodeId n = last; n >= 0; --n) {
    Node node = graph.node(n);  // a copy: appending nodes may move the node list
    std::vector<ValueId> dys;
    bool has_grad = false;
    for (ValueId out : node.outputs) {
      dys.push_back(grad[out]);
      has_grad = has_grad || grad[out] != kNoGradient;
    }
    bool inputs_need = false;
    for (ValueId in : node.inputs) inputs_need = inputs_need || depends[in];
    if (!has_grad || !inputs_need) continue;
    const GradRule rule = op_rules(node.kind).grad;
    if (rule == nullptr)
      throw GraphError("op '" + std::string(name(node.kind)) +
                       "' has no gradient rule (it is itself part of a backward pass or an update)");
    auto input_grads = rule(graph, node, dys);
    for (std::size_t i = 0; i < input_grads.size(); ++i) {
      ValueId in = node.inputs[i], dx = input_grads[i];
      if (dx == kNoGradient || !depends[in] || !is_floating(graph.dtype(in))) continue;
      if (grad[in] != kNoGradient && graph.dtype(grad[in]) != graph.dtype(dx)) {
        // A bf16 value read by a mixed product (f32 gradients) and by a bf16 op: add in f32.
        grad[in] = graph.cast(grad[in], DType::f32);
        dx = graph.cast(dx, DType::f32);
      }
      grad[in] = grad[in] == kNoGradient ? dx : graph.add(grad[in], dx);
    }
  }

  // Each gradient in its value's dtype (a mixed product gives bf16 operands f32 ones).
  std::unordered_map<ValueId, ValueId> result;
  for (ValueId v : wrt)
    result[v] = grad[v] != kNoGradient ? graph.cast(grad[v], graph.dtype(v)) : graph.fill(graph.shape(v), 0.0, graph.dtype(v));
  return result;
}

}  // namespace tessera
