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

}  // namespace

void ops::add_embedding_rules(OpRuleTable& t) {
  entry(t, OpKind::embedding) = {embedding_grads, run_embedding};
  entry(t, OpKind::embedding_grad).run = [](NodeRun& r) {
    r.backend.fill(r.out(0), 0.0);
    r.backend.embedding_backward(r.in(0), r.in(1), r.out(0));
  };
  entry(t, OpKind::one_hot) = {
      [](Graph&, const Node&, const std::vector<ValueId>&) -> std::vector<ValueId> { return {kNoGradient}; },  // ids
      [](NodeRun& r) { r.backend.one_hot(r.in(0), r.out(0)); }};
}

}  // namespace tessera
