#include "engine/graph/fusion.hpp"

#include <algorithm>
#include <optional>

namespace tessera {
namespace {

std::optional<Activation> activation_of(UnaryOp op) {
  switch (op) {
    case UnaryOp::relu: return Activation::relu;
    case UnaryOp::gelu_tanh: return Activation::gelu_tanh;
    case UnaryOp::gelu_erf: return Activation::gelu_erf;
    case UnaryOp::tanh: return Activation::tanh;
    case UnaryOp::sigmoid: return Activation::sigmoid;
    default: return std::nullopt;
  }
}

}  // namespace

std::unordered_map<NodeId, Epilogue> fuse_epilogues(const Graph& graph, std::vector<NodeId>& schedule,
                                                    const std::vector<ValueId>& outputs) {
  // Readers of each value among the scheduled nodes, and where each node runs.
  std::vector<std::vector<NodeId>> readers(static_cast<std::size_t>(graph.value_count()));
  std::vector<int> position(static_cast<std::size_t>(graph.node_count()), -1);
  for (std::size_t i = 0; i < schedule.size(); ++i) {
    position[schedule[i]] = static_cast<int>(i);
    for (ValueId in : graph.node(schedule[i]).inputs) readers[in].push_back(schedule[i]);
  }
  // The one node that reads `v`, when exactly one does and `v` is not an output.
  auto sole_reader = [&](ValueId v) -> const Node* {
    if (readers[v].size() != 1 || std::find(outputs.begin(), outputs.end(), v) != outputs.end()) return nullptr;
    return &graph.node(readers[v][0]);
  };
  // Whether `v` exists before position `at` (its producer, a leaf's node included, runs earlier).
  auto defined_before = [&](ValueId v, int at) {
    NodeId producer = graph.value(v).producer;
    return producer < 0 || (position[producer] >= 0 && position[producer] < at);
  };

  std::unordered_map<NodeId, Epilogue> fused;
  std::vector<bool> absorbed(static_cast<std::size_t>(graph.node_count()), false);
  for (NodeId n : schedule) {
    const Node& node = graph.node(n);
    if (node.kind == OpKind::pool2d_grad) {
      // (x, dy) -> dx, then relu's unary_grad (x, dx): x is the ReLU's output.
      const Node* relu = sole_reader(node.outputs[0]);
      if (node.attrs.pool.kind == PoolKind::max && graph.dtype(node.inputs[0]) == DType::f32 &&
          graph.dtype(node.outputs[0]) == DType::f32 &&
          relu != nullptr && relu->kind == OpKind::unary_grad && relu->attrs.unary == UnaryOp::relu &&
          relu->inputs[0] == node.inputs[0] && relu->inputs[1] == node.outputs[0] &&
          graph.dtype(relu->outputs[0]) == DType::f32) {
        absorbed[readers[node.outputs[0]][0]] = true;
        fused.emplace(n, Epilogue{.activation = Activation::relu, .out = relu->outputs[0]});
      }
      continue;
    }
    if (node.kind != OpKind::matmul && node.kind != OpKind::conv2d) continue;
    if (node.kind == OpKind::matmul && node.attrs.matmul.activation != Activation::none) continue;
    if (node.kind == OpKind::conv2d && node.attrs.conv.activation != Activation::none) continue;
    Epilogue e;
    std::vector<NodeId> replaced;  // the add and activation nodes it absorbs
    e.out = node.outputs[0];
    const Shape& shape = graph.shape(e.out);
    const DType dtype = graph.dtype(e.out);
    if (const Node* add = sole_reader(e.out);
        add != nullptr && add->kind == OpKind::binary && add->attrs.binary == BinaryOp::add) {
      ValueId bias = add->inputs[0] == e.out ? add->inputs[1] : add->inputs[0];
      const Shape& bs = graph.shape(bias);
      if (bias != e.out && bs.rank() == 1 && shape.rank() >= 1 && bs[0] == shape[shape.rank() - 1] &&
          graph.dtype(bias) == dtype && graph.shape(add->outputs[0]) == shape &&
          graph.dtype(add->outputs[0]) == dtype && defined_before(bias, position[n])) {
        e.bias = bias;
        e.out = add->outputs[0];
        replaced.push_back(readers[node.outputs[0]][0]);
      }
    }
    if (const Node* act = sole_reader(e.out); act != nullptr && act->kind == OpKind::unary)
        if (auto activation = activation_of(act->attrs.unary);
            activation && graph.dtype(act->outputs[0]) == dtype) {
          e.activation = *activation;
          NodeId act_node = readers[e.out][0];
          e.out = act->outputs[0];
          replaced.push_back(act_node);
        }
    if (replaced.empty()) continue;
    for (NodeId a : replaced) absorbed[a] = true;
    fused.emplace(n, std::move(e));
  }
  std::erase_if(schedule, [&](NodeId n) { return absorbed[n]; });
  return fused;
}

}  // namespace tessera
