#include "engine/graph/graph.hpp"

#include "engine/core/error.hpp"

namespace tessera {

ValueId Graph::input(const std::string& name, const Shape& shape, DType dtype) {
  return leaf(OpKind::input, name, shape, dtype);
}

ValueId Graph::variable(const std::string& name, const Shape& shape, DType dtype) {
  return leaf(OpKind::variable, name, shape, dtype);
}

ValueId Graph::fill(const Shape& shape, double value, DType dtype) {
  OpAttrs attrs;
  attrs.scalar = value;
  return leaf(OpKind::fill, "", shape, dtype, attrs);
}

ValueId Graph::matmul(ValueId a, ValueId b, const MatmulArgs& args) {
  check_same_dtype("matmul", a, b);
  check_floating("matmul", a);
  OpAttrs attrs;
  attrs.matmul = args;
  return single(OpKind::matmul, {a, b}, attrs, matmul_output_shape(shape(a), shape(b), args), dtype(a));
}

ValueId Graph::conv2d(ValueId x, ValueId w, const Conv2dArgs& args) {
  check_same_dtype("conv2d", x, w);
  OpAttrs attrs;
  attrs.conv = args;
  return single(OpKind::conv2d, {x, w}, attrs, conv2d_output_shape(shape(x), shape(w), args), dtype(x));
}

ValueId Graph::pool2d(ValueId x, const Pool2dArgs& args) {
  check_floating("pool2d", x);
  OpAttrs attrs;
  attrs.pool = args;
  return single(OpKind::pool2d, {x}, attrs, pool2d_output_shape(shape(x), args), dtype(x));
}

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

ValueId Graph::scale(ValueId x, double factor) {
  return mul(x, fill(Shape{}, factor, dtype(x)));
}

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
  if (!b || *b != target)
    throw ShapeError("broadcast_to: " + describe(x) + " does not broadcast to " + target.str());
  OpAttrs attrs;
  attrs.shape = target;
  return single(OpKind::broadcast_to, {x}, attrs, target, dtype(x));
}

ValueId Graph::reshape(ValueId x, const Shape& target) {
  if (target.numel() != shape(x).numel())
    throw ShapeError("reshape: cannot view " + describe(x) + " as " + target.str() + " (" +
                     std::to_string(shape(x).numel()) + " vs " + std::to_string(target.numel()) +
                     " elements)");
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
    throw ShapeError("layer_norm: gamma " + describe(gamma) + " and beta " + describe(beta) +
                     " must both be " + features.str() + " for x " + describe(x));
  check_same_dtype("layer_norm", x, gamma);
  check_same_dtype("layer_norm", x, beta);
  OpAttrs attrs;
  attrs.epsilon = epsilon;
  Shape rows{xs.rows()};
  NodeId n = add_node(OpKind::layer_norm, {x, gamma, beta}, attrs,
                      {{xs, dtype(x)}, {rows, DType::f32}, {rows, DType::f32}});
  return nodes_[n].outputs;
}

ValueId Graph::embedding(ValueId table, ValueId ids) {
  if (dtype(ids) != DType::i32 && dtype(ids) != DType::i64)
    throw DTypeError("embedding: ids " + describe(ids) + " must be i32 or i64");
  return single(OpKind::embedding, {table, ids}, {}, embedding_output_shape(shape(table), shape(ids)),
                dtype(table));
}

ValueId Graph::one_hot(ValueId ids, std::int64_t classes, DType to) {
  if (dtype(ids) != DType::i32 && dtype(ids) != DType::i64)
    throw DTypeError("one_hot: ids " + describe(ids) + " must be i32 or i64");
  if (classes < 1) throw ShapeError("one_hot: the number of classes must be >= 1");
  auto dims = shape(ids).dims();
  dims.push_back(classes);
  OpAttrs attrs;
  attrs.shape = Shape(dims);
  attrs.dtype = to;
  return single(OpKind::one_hot, {ids}, attrs, attrs.shape, to);
}

ValueId Graph::dropout(ValueId x, float rate, std::uint64_t seed) {
  check_floating("dropout", x);
  if (!(rate >= 0.0f && rate < 1.0f))
    throw Error("dropout: rate must lie in [0, 1), got " + std::to_string(rate));
  if (rate == 0.0f) return x;
  OpAttrs attrs;
  attrs.scalar = rate;
  attrs.seed = seed;
  return single(OpKind::dropout, {x}, attrs, shape(x), dtype(x));
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
    if (!ok)
      throw ShapeError("concat: " + describe(xs[0]) + " and " + describe(x) + " differ outside axis " + std::to_string(a));
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

ValueId Graph::cast(ValueId x, DType to) {
  if (dtype(x) == to) return x;
  OpAttrs attrs;
  attrs.dtype = to;
  return single(OpKind::cast, {x}, attrs, shape(x), to);
}

NodeId Graph::sgd_update(ValueId param, ValueId grad, ValueId velocity, const SgdArgs& args) {
  if (shape(grad) != shape(param) || shape(velocity) != shape(param))
    throw ShapeError("sgd_update: param " + describe(param) + ", grad " + describe(grad) +
                     " and velocity " + describe(velocity) + " must have one shape");
  OpAttrs attrs;
  attrs.sgd = args;
  return add_node(OpKind::sgd_update, {param, grad, velocity}, attrs, {});
}

NodeId Graph::moving_average(ValueId state, ValueId value, float momentum) {
  if (shape(value) != shape(state))
    throw ShapeError("moving_average: value " + describe(value) + " must have the shape of state " + describe(state));
  OpAttrs attrs;
  attrs.scalar = momentum;
  return add_node(OpKind::moving_average, {state, value}, attrs, {});
}

NodeId Graph::adam_update(ValueId param, ValueId grad, ValueId m, ValueId v, const AdamArgs& args) {
  if (shape(grad) != shape(param) || shape(m) != shape(param) || shape(v) != shape(param))
    throw ShapeError("adam_update: param " + describe(param) + ", grad " + describe(grad) +
                     ", m " + describe(m) + " and v " + describe(v) + " must have one shape");
  OpAttrs attrs;
  attrs.adam = args;
  return add_node(OpKind::adam_update, {param, grad, m, v}, attrs, {});
}

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
