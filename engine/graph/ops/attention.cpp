// Attention over a KV cache, for incremental decoding (engine/run/kv_decoder.hpp).
//   cached_attention: (q, keys, values, positions) -> softmax(attrs.scalar * q keys^T) values,
//                     query t of sequence b over cache rows 0 .. positions[b] + t only
// One op instead of matmul, mask, softmax and matmul over the whole cache: a
// decode step reads the rows its sequences have filled, not the context's.
#include "backends/backend.hpp"
#include "engine/graph/op_rules.hpp"

namespace tessera {

ValueId Graph::cached_attention(ValueId query, ValueId keys, ValueId values, ValueId positions, float scale) {
  check_floating("cached_attention", query);
  check_same_dtype("cached_attention", query, keys);
  check_same_dtype("cached_attention", query, values);
  const Shape& q = shape(query);
  const Shape& k = shape(keys);
  if (q.rank() != 4 || k.rank() != 4 || q[0] != k[0] || q[1] != k[1] || q[3] != k[3] || q[2] > k[2])
    throw ShapeError("cached_attention: query " + describe(query) + " must be [B, H, T, K] with T at most C for keys " +
                     describe(keys) + " [B, H, C, K]");
  if (shape(values) != k)
    throw ShapeError("cached_attention: values " + describe(values) + " must have the shape of keys " + describe(keys));
  if (shape(positions) != Shape{q[0], 1} || dtype(positions) != DType::i32)
    throw ShapeError("cached_attention: positions " + describe(positions) + " must be i32[" + std::to_string(q[0]) + ", 1]");
  OpAttrs attrs;
  attrs.scalar = scale;
  return single(OpKind::cached_attention, {query, keys, values, positions}, attrs, q, dtype(query));
}

namespace {

// Sequences and heads split alike on every operand; a query's position, the
// cache's rows and the key width stay whole. The result is linear in the values.
ShardingRule cached_attention_sharding(const Graph&, const Node&) {
  constexpr DimRole kWhole{};
  constexpr DimRole sequences{DimRole::result, 0}, heads{DimRole::result, 1};
  const std::vector<DimRole> rows = {sequences, heads, kWhole, kWhole};
  return contraction_rule({rows, rows, rows, {sequences, kWhole}}, 0, {false, false, true, false});
}

// Two products of T x K by C per sequence and head: every row counted, as a
// cost model cannot know the positions.
std::int64_t cached_attention_flops(const Graph& g, const Node& node) {
  const Shape& q = g.shape(node.inputs[0]);
  return 4 * q.numel() * g.shape(node.inputs[1])[2];
}

}  // namespace

void ops::add_attention_rules(OpRuleTable& t) {
  entry(t, OpKind::cached_attention) = {
      nullptr,
      [](NodeRun& r) {
        r.backend.cached_attention(r.in(0), r.in(1), r.in(2), r.in(3), r.out(0), static_cast<float>(r.node.attrs.scalar));
      },
      cached_attention_sharding, cached_attention_flops};
}

}  // namespace tessera
