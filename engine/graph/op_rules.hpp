// The rules of each graph op: how autodiff differentiates it, how an
// executor runs it, how it computes on split operands and how many FLOPs it
// costs, one entry per OpKind. Each op's rules are written next to its builder (the Graph method
// that checks its operands' shapes and dtypes), in one file per family of ops
// under engine/graph/ops/; op_rules.cpp gathers them. The op's name, arity
// and traits are in the op table (backends/op_kinds.hpp), its kernels in each
// backend.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "engine/core/tensor.hpp"
#include "engine/graph/graph.hpp"
#include "engine/graph/sharding_rule.hpp"

namespace tessera {

class Backend;
class CollectiveContext;
struct ConvReluGradient;
struct Epilogue;
struct PackedMatrix;
struct UpdateProduct;

// A node as its run rule sees it: its tensors, the device's backend, and the
// executor's state that some ops read (the step for updates and dropout, the
// collectives of a partitioned graph, a fused epilogue).
struct NodeRun {
  const Graph& graph;
  const Node& node;
  Backend& backend;
  std::vector<Tensor>& values;             // every value's tensor, by ValueId
  const Epilogue* epilogue;                // the fused bias and activation (matmul, conv2d, pool2d_grad) or cast, if any
  const CollectiveContext* collectives;    // null unless the graph is partitioned
  std::int64_t update_step;                // the optimizer step (1-based); 0: the attributes' step + runs
  std::int64_t runs;                       // earlier runs of this executor
  float learning_rate;                     // 0: the attributes'
  const Tensor* transposed_b;              // matmul: a kept transposed copy of b to multiply instead, or null
  const PackedMatrix* packed_b;            // matmul: a kept packed copy of op(b) to multiply instead, or null
  const UpdateProduct* update_product;     // sgd or adam update: the gradient's operands a and b, the
                                           // product computed by the update (fusion.hpp), or null
  ValueId bias_gradient = -1;              // conv2d_grad_weight: the bias gradient [1, 1, 1, F] it
                                           // writes too (fusion.hpp), or -1
  const ConvReluGradient* conv_relu_gradient = nullptr;  // conv2d_grad_weight: the ReLU's output and the
                                                         // gradient at it, read instead of dy (fusion.hpp), or null

  const Tensor& in(int i) const { return values[static_cast<std::size_t>(node.inputs[static_cast<std::size_t>(i)])]; }
  const Tensor& value(ValueId v) const { return values[static_cast<std::size_t>(v)]; }
  const Tensor& out(int i) const { return values[static_cast<std::size_t>(node.outputs[static_cast<std::size_t>(i)])]; }
  // For ops whose output is a view of an input (reshape, block_view).
  void set_out(int i, Tensor view) { values[static_cast<std::size_t>(node.outputs[static_cast<std::size_t>(i)])] = std::move(view); }
  // Throws GraphError naming the op outside a partitioned graph.
  const CollectiveContext& spmd() const;
  // What a matmul or conv2d writes: with a fused epilogue its bias (else
  // null), its activation (else none) and the value after them (else out(0)).
  // For a pool2d_grad, relu is the ReLU's gradient taken after it. For a
  // layer_norm or unary op, fused_out is the bf16 cast of its f32 output.
  const Tensor* fused_bias() const;
  Activation fused_activation() const;
  const Tensor& fused_out() const;
};

// The gradients of a node's inputs, one per input (kNoGradient where there is
// none), given the gradients of its outputs (kNoGradient where an output has none).
inline constexpr ValueId kNoGradient = -1;
using GradRule = std::vector<ValueId> (*)(Graph& graph, const Node& node, const std::vector<ValueId>& output_grads);
using RunRule = void (*)(NodeRun& run);
using ShardRule = ShardingRule (*)(const Graph& graph, const Node& node);
using FlopsRule = std::int64_t (*)(const Graph& graph, const Node& node);

struct OpRules {
  GradRule grad = nullptr;    // null: not differentiable (autodiff names the op)
  RunRule run = nullptr;
  ShardRule shard = nullptr;  // null: the partitioner places it itself (leaves, collectives) or refuses it
  FlopsRule flops = nullptr;  // the FLOPs a cost model counts; null: a memory-bound op (none counted)
};
const OpRules& op_rules(OpKind kind);

// Appends a node of `kind` with one output of `shape`/`dtype` and returns that
// output (for grad rules that emit backward ops with no builder of their own).
inline ValueId emit(Graph& graph, OpKind kind, std::vector<ValueId> inputs, const OpAttrs& attrs, const Shape& shape,
                    DType dtype) {
  return graph.node(graph.add_node(kind, std::move(inputs), attrs, {{shape, dtype}})).outputs[0];
}

// The families of ops (engine/graph/ops/*.cpp), each filling its ops' entries.
using OpRuleTable = std::array<OpRules, kOpKindCount>;
inline OpRules& entry(OpRuleTable& table, OpKind kind) { return table[static_cast<std::size_t>(kind)]; }
namespace ops {
void add_leaf_rules(OpRuleTable& table);         // input, variable, fill
void add_matmul_rules(OpRuleTable& table);       // matmul
void add_conv_pool_rules(OpRuleTable& table);    // conv2d, pool2d and their gradients
void add_elementwise_rules(OpRuleTable& table);  // unary, binary, cast, dropout
void add_reduce_rules(OpRuleTable& table);       // reduce, broadcast_to
void add_layout_rules(OpRuleTable& table);       // reshape, transpose, concat, slice
void add_normalization_rules(OpRuleTable& table);  // softmax, layer_norm and their gradients
void add_attention_rules(OpRuleTable& table);    // cached_attention, attention and its gradient
void add_embedding_rules(OpRuleTable& table);    // embedding, its gradient, one_hot
void add_update_rules(OpRuleTable& table);       // sgd_update, adam_update, moving_average
void add_collective_rules(OpRuleTable& table);   // the collectives and views of partitioned graphs
}  // namespace ops

}  // namespace tessera
