// Lookups by integer ids.
//   embedding:      (table, ids) -> table rows; in a partitioned graph whose
//                   attrs.mesh_axes split the vocabulary, a masked lookup of this device's block
//   embedding_grad: (ids, dy) -> dtable of shape attrs.shape (scatter-add into zeros)
//   one_hot:        (ids) -> [..., attrs.shape[-1]] of 0/1 in attrs.dtype (no gradient)
#include <bit>

#include "backends/backend.hpp"
#include "engine/graph/collective_context.hpp"
#include "engine/graph/op_rules.hpp"

namespace tessera {

ValueId Graph::embedding(ValueId table, ValueId ids) {
  if (dtype(ids) != DType::i32 && dtype(ids) != DType::i64)
    throw DTypeError("embedding: ids " + describe(ids) + " must be i32 or i64");
  return single(OpKind::embedding, {table, ids}, {}, embedding_output_shape(shape(table), shape(ids)), dtype(table));
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

namespace {

std::vector<ValueId> embedding_grads(Graph& g, const Node& n, const std::vector<ValueId>& dys) {
  OpAttrs attrs = n.attrs;
  attrs.shape = g.shape(n.inputs[0]);
  return {emit(g, OpKind::embedding_grad, {n.inputs[1], dys[0]}, attrs, attrs.shape, g.dtype(dys[0])), kNoGradient};
}

void run_embedding(NodeRun& r) {
  const std::uint32_t split = r.node.attrs.mesh_axes;
  if (split == 0) return r.backend.embedding(r.in(0), r.in(1), r.out(0));
  // A partitioned graph's block of the vocabulary: other devices hold the other rows.
  const std::int64_t rows = r.in(0).shape()[0];
  r.backend.embedding_block(r.in(0), r.in(1), r.out(0), r.spmd().coordinate(std::countr_zero(split)) * rows,
                            rows * r.spmd().group_size(split));
}

// (table[V,D], ids[...]) -> [..., D]. A vocabulary split is a masked lookup
// of each device's rows whose results add up: the vocabulary acts as a
// summed dimension, and the run rule needs the axis splitting it.
ShardingRule embedding_sharding(const Graph& g, const Node& node) {
  const int ids_rank = g.shape(node.inputs[1]).rank();
  std::vector<DimRole> ids;
  for (int d = 0; d < ids_rank; ++d) ids.push_back({DimRole::result, d});
  ShardingRule rule =
      contraction_rule({{{DimRole::summed, 0}, {DimRole::result, ids_rank}}, std::move(ids)}, 1, {true, false});
  // The ids' split (the batch) wins over the vocabulary's when they share an
  // axis: gathering the table once costs less than all-reducing a batch of rows.
  rule.results_first = true;
  rule.block_axis = DimRef{.result = false, .index = 0, .dim = 0};
  return rule;
}

// (ids[...], dy[..., D]) -> dtable[V, D]: a sum over the ids' dimensions.
ShardingRule embedding_grad_sharding(const Graph& g, const Node& node) {
  const int ids_rank = g.shape(node.inputs[0]).rank();
  std::vector<DimRole> ids;
  for (int d = 0; d < ids_rank; ++d) ids.push_back({DimRole::summed, d});
  std::vector<DimRole> dy = ids;
  dy.push_back({DimRole::result, 1});
  return contraction_rule({std::move(ids), std::move(dy)}, ids_rank, {false, true});
}

ShardingRule one_hot_sharding(const Graph& g, const Node& node) {  // the classes' dimension is whole
  std::vector<DimRole> ids;
  for (int d = 0; d < g.shape(node.inputs[0]).rank(); ++d) ids.push_back({DimRole::result, d});
  return contraction_rule({std::move(ids)}, 0, {});
}

}  // namespace

void ops::add_embedding_rules(OpRuleTable& t) {
  entry(t, OpKind::embedding) = {embedding_grads, run_embedding, embedding_sharding};
  entry(t, OpKind::embedding_grad) = {nullptr,
                                      [](NodeRun& r) {
                                        r.backend.fill(r.out(0), 0.0);
                                        r.backend.embedding_backward(r.in(0), r.in(1), r.out(0));
                                      },
                                      embedding_grad_sharding};
  entry(t, OpKind::one_hot) = {
      [](Graph&, const Node&, const std::vector<ValueId>&) -> std::vector<ValueId> { return {kNoGradient}; },  // ids
      [](NodeRun& r) { r.backend.one_hot(r.in(0), r.out(0)); }, one_hot_sharding};
}

}  // namespace tessera
