// The graph's bookkeeping: nodes, values, names. Each op's builder (its shape
// and dtype checks) is in engine/graph/ops/, next to its other rules.
#include "engine/graph/graph.hpp"

#include "engine/core/error.hpp"

namespace tessera {

NodeId Graph::add_node(OpKind kind, std::vector<ValueId> inputs, const OpAttrs& attrs,
                       const std::vector<std::pair<Shape, DType>>& output_types) {
  const int arity = op_info(kind).arity;
  if (arity >= 0 && inputs.size() != static_cast<std::size_t>(arity))
    throw GraphError(std::string(name(kind)) + " takes " + std::to_string(arity) + " inputs, got " +
                     std::to_string(inputs.size()));
  for (ValueId in : inputs)
    if (in < 0 || in >= value_count())
      throw GraphError(std::string(name(kind)) + ": input value " + std::to_string(in) +
                       " does not exist in this graph");
  auto id = static_cast<NodeId>(nodes_.size());
  Node node{kind, std::move(inputs), {}, attrs};
  for (std::size_t i = 0; i < output_types.size(); ++i) {
    node.outputs.push_back(static_cast<ValueId>(values_.size()));
    values_.push_back(Value{output_types[i].first, output_types[i].second, id, static_cast<int>(i), ""});
  }
  nodes_.push_back(std::move(node));
  return id;
}

const Value& Graph::value(ValueId id) const {
  if (id < 0 || id >= value_count())
    throw GraphError("value " + std::to_string(id) + " does not exist in this graph");
  return values_[static_cast<std::size_t>(id)];
}

const Node& Graph::node(NodeId id) const {
  if (id < 0 || id >= node_count())
    throw GraphError("node " + std::to_string(id) + " does not exist in this graph");
  return nodes_[static_cast<std::size_t>(id)];
}

std::vector<ValueId> Graph::variables() const {
  std::vector<ValueId> out;
  for (const auto& n : nodes_)
    if (n.kind == OpKind::variable) out.push_back(n.outputs[0]);
  return out;
}

std::string Graph::str() const {
  std::string s;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    s += "#" + std::to_string(i) + " " + std::string(name(n.kind)) + "(";
    for (std::size_t j = 0; j < n.inputs.size(); ++j) s += (j ? ", %" : "%") + std::to_string(n.inputs[j]);
    s += ") ->";
    for (ValueId out : n.outputs) s += " %" + std::to_string(out) + ":" + describe(out);
    s += "\n";
  }
  return s;
}

ValueId Graph::leaf(OpKind kind, const std::string& name, const Shape& shape, DType dtype,
                    const OpAttrs& attrs) {
  NodeId n = add_node(kind, {}, attrs, {{shape, dtype}});
  ValueId v = nodes_[n].outputs[0];
  values_[v].name = name;
  return v;
}

ValueId Graph::single(OpKind kind, std::vector<ValueId> inputs, const OpAttrs& attrs,
                      const Shape& shape, DType dtype) {
  return nodes_[add_node(kind, std::move(inputs), attrs, {{shape, dtype}})].outputs[0];
}

void Graph::check_floating(std::string_view op, ValueId id) const {
  if (!is_floating(dtype(id)))
    throw DTypeError(std::string(op) + ": " + describe(id) + " must have a floating dtype");
}

void Graph::check_same_dtype(std::string_view op, ValueId a, ValueId b) const {
  if (dtype(a) != dtype(b))
    throw DTypeError(std::string(op) + ": operand dtypes differ: " + describe(a) + " and " + describe(b));
}

std::string Graph::describe(ValueId id) const {
  const Value& v = value(id);
  std::string s = std::string(dtype_name(v.dtype)) + v.shape.str();
  return v.name.empty() ? s : "'" + v.name + "' " + s;
}

}  // namespace tessera
