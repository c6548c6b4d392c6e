// Graph: a static dataflow graph of primitive ops with shapes and dtypes known
// at build time.
//
// Builders check their operands (through the same shape-inference functions the
// backends use), record a node and return the ids of its outputs; nothing is
// computed. Nodes are appended in a valid execution order by construction (a
// node can only use values that already exist), so the node list is already a
// topological schedule. Autodiff appends the backward nodes to the same graph;
// the executor runs a subset of it.
//
//   Graph g;
//   ValueId x = g.input("x", {128, 784});
//   ValueId w = g.variable("dense/kernel", {784, 10});
//   ValueId logits = g.matmul(x, w);
//   ValueId loss = g.reduce(ReduceOp::mean, g.unary(UnaryOp::square, logits), {0, 1});
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "engine/graph/op.hpp"

namespace tessera {

using ValueId = std::int32_t;
using NodeId = std::int32_t;

// Whether the devices a graph runs on have attention kernels of their own,
// forward and backward, for q, k, v in `operands`, out in `out`, heads of
// `width` (Backend::prefers_attention_op).
using AttentionKernelTest = std::function<bool(DType operands, DType out, std::int64_t width)>;

struct Value {
  Shape shape;
  DType dtype = DType::f32;
  NodeId producer = -1;
  int output_index = 0;
  std::string name;  // variable path or input name; empty for intermediates
};

struct Node {
  OpKind kind;
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;
  OpAttrs attrs;
};

class Graph {
 public:
  // Leaves.
  ValueId input(const std::string& name, const Shape& shape, DType dtype = DType::f32);
  ValueId variable(const std::string& name, const Shape& shape, DType dtype = DType::f32);
  ValueId fill(const Shape& shape, double value, DType dtype = DType::f32);

  // Dense algebra.
  ValueId matmul(ValueId a, ValueId b, const MatmulArgs& args = {});
  // The product of bf16 operands accumulated and kept in f32 (`out` f32), or
  // in the operands' dtype: what mixed precision's matmuls build.
  ValueId matmul(ValueId a, ValueId b, const MatmulArgs& args, DType out);
  // Mixed precision: from now on, a matmul of f32 operands casts them to
  // `dtype` (bf16) and keeps their product in f32 (accumulated there by the
  // kernel, never rounded to bf16), gradients' matmuls included; every other
  // op and the variables stay f32. f32 (the default) builds matmuls as they are.
  void set_matmul_dtype(DType dtype) { matmul_dtype_ = dtype; }
  ValueId conv2d(ValueId x, ValueId w, const Conv2dArgs& args);
  ValueId pool2d(ValueId x, const Pool2dArgs& args);

  // Elementwise and reductions.
  ValueId unary(UnaryOp op, ValueId x);
  ValueId binary(BinaryOp op, ValueId a, ValueId b);
  ValueId add(ValueId a, ValueId b) { return binary(BinaryOp::add, a, b); }
  ValueId sub(ValueId a, ValueId b) { return binary(BinaryOp::sub, a, b); }
  ValueId mul(ValueId a, ValueId b) { return binary(BinaryOp::mul, a, b); }
  ValueId div(ValueId a, ValueId b) { return binary(BinaryOp::div, a, b); }
  ValueId scale(ValueId x, double factor);  // x * factor
  // Reduction over `axes`; without keepdims the reduced axes are dropped.
  ValueId reduce(ReduceOp op, ValueId x, const std::vector<int>& axes, bool keepdims = false);

  // Shape manipulation.
  ValueId broadcast_to(ValueId x, const Shape& shape);
  ValueId reshape(ValueId x, const Shape& shape);
  ValueId transpose(ValueId x, const std::vector<int>& perm);

  // Normalisation, embedding, casts.
  ValueId softmax(ValueId x, int axis = -1, bool log = false);
  // Softmax over the last axis of x[..., queries, keys] in which query i sees
  // keys up to its own position i + keys - queries: attention's causal mask.
  ValueId causal_softmax(ValueId x);
  // Attention of queries [B, H, T, K] over a KV cache (keys and values
  // [B, H, C, K], Graph::cache_write): softmax(scale * q keys^T) values,
  // query t of sequence b seeing cache positions 0 .. positions[b] + t
  // (positions i32 [B, 1]: the first query's position) and nothing after, so
  // a decode step reads only the filled rows. Not differentiable.
  ValueId cached_attention(ValueId query, ValueId keys, ValueId values, ValueId positions, float scale);
  // Attention, softmax(scale * q k^T) v, of q [..., Tq, K] over k and v
  // [..., Tk, K] (the same leading axes; causal: query i sees keys 0 .. i +
  // Tk - Tq), or of q [B, Tq, H, K] over k and v [B, Tk, H, K] into [B, Tq,
  // H, K] where args.tokens_first: one attention op where
  // set_attention_kernel's test takes it, its gradient one attention_grad
  // op that recomputes the weights from each row's logsumexp; else matmul,
  // (causal) softmax and matmul (between head transposes, tokens first). In
  // mixed precision q, k, v are cast to bf16 and the output kept in f32, as
  // matmuls do.
  ValueId attention(ValueId q, ValueId k, ValueId v, const AttentionArgs& args);
  // From now on, attention() builds one op where `test` says the devices run
  // it as kernels of their own (null, the default: never).
  void set_attention_kernel(AttentionKernelTest test) { attention_kernel_ = std::move(test); }
  // Returns {y, mean, rstd}; mean and rstd feed the backward pass.
  std::vector<ValueId> layer_norm(ValueId x, ValueId gamma, ValueId beta, float epsilon = 1e-5f);
  ValueId embedding(ValueId table, ValueId ids);
  ValueId one_hot(ValueId ids, std::int64_t classes, DType dtype = DType::f32);
  ValueId cast(ValueId x, DType dtype);
  // Inverted dropout for training; each run (optimizer step) draws a new mask.
  ValueId dropout(ValueId x, float rate, std::uint64_t seed);
  // Joins values along `axis`; the other extents must agree.
  ValueId concat(const std::vector<ValueId>& xs, int axis);
  // x[start : start + length] along `axis`.
  ValueId slice(ValueId x, int axis, std::int64_t start, std::int64_t length);

  // Optimizer updates (side effects on variables; no outputs).
  NodeId sgd_update(ValueId param, ValueId grad, ValueId velocity, const SgdArgs& args);
  // A side effect on a (non-trainable) variable, like the updates above.
  NodeId moving_average(ValueId state, ValueId value, float momentum);
  NodeId adam_update(ValueId param, ValueId grad, ValueId m, ValueId v, const AdamArgs& args);
  // Writes rows [B, H, T, K] into the cache variable [B, H, C, K] at each
  // sequence's positions [B, 1] (i32): cache[b, :, positions[b] + t, :] =
  // rows[b, :, t, :]. Nodes traced after it read the written cache (a KV cache).
  NodeId cache_write(ValueId cache, ValueId rows, ValueId positions);

  // Used by autodiff and tests: append a node whose outputs have the given types.
  NodeId add_node(OpKind kind, std::vector<ValueId> inputs, const OpAttrs& attrs,
                  const std::vector<std::pair<Shape, DType>>& output_types);

  const Value& value(ValueId id) const;
  const Node& node(NodeId id) const;
  // By value: appending nodes may move the value list under a reference.
  Shape shape(ValueId id) const { return value(id).shape; }
  DType dtype(ValueId id) const { return value(id).dtype; }
  int value_count() const { return static_cast<int>(values_.size()); }
  int node_count() const { return static_cast<int>(nodes_.size()); }
  // The variables, in creation order.
  std::vector<ValueId> variables() const;

  std::string str() const;  // one line per node, for debugging and `tessera inspect`

 private:
  ValueId leaf(OpKind kind, const std::string& name, const Shape& shape, DType dtype,
               const OpAttrs& attrs = {});
  ValueId single(OpKind kind, std::vector<ValueId> inputs, const OpAttrs& attrs, const Shape& shape,
                 DType dtype);
  void check_floating(std::string_view op, ValueId id) const;
  void check_same_dtype(std::string_view op, ValueId a, ValueId b) const;
  std::string describe(ValueId id) const;

  std::vector<Value> values_;
  std::vector<Node> nodes_;
  DType matmul_dtype_ = DType::f32;
  AttentionKernelTest attention_kernel_;
  // cast(): the cast of a computed value to a dtype, made once and reused (the
  // three projections of one x in mixed precision); not of a leaf or a view of
  // one, whose bytes an update or a cache write may change between two casts.
  std::map<std::pair<ValueId, DType>, ValueId> casts_;
};

}  // namespace tessera
