// Attention as ops of its own.
//   cached_attention: (q, keys, values, positions) -> softmax(attrs.scalar * q keys^T) values,
//                     query t of sequence b over cache rows 0 .. positions[b] + t only
//   attention: (q, k, v) -> (softmax(scale * q k^T) v, logsumexp), see attrs.attention
//   attention_grad: (q, k, v, out, logsumexp, dout) -> (dq, dk, dv)
// cached_attention, for incremental decoding (engine/run/kv_decoder.hpp), is
// one op instead of matmul, mask, softmax and matmul over the whole cache: a
// decode step reads the rows its sequences have filled, not the context's.
// attention and its gradient are FlashAttention's pair where a device has
// the kernels (Graph::set_attention_kernel): training without the [Tq, Tk]
// scores and weights in memory, each row's logsumexp kept instead.
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

const std::vector<int> kHeadsSwap{0, 2, 1, 3};  // [B, T, H, K] as [B, H, T, K], and back

}  // namespace

ValueId Graph::attention(ValueId q, ValueId k, ValueId v, const AttentionArgs& args) {
  check_floating("attention", q);
  check_same_dtype("attention", q, k);
  check_same_dtype("attention", q, v);
  Shape rows;
  try {
    rows = attention_rows_shape("attention", shape(q), shape(k), shape(v), args);
  } catch (const ShapeError& e) {
    throw ShapeError(std::string(e.what()) + " (query " + describe(q) + ", key " + describe(k) + ", value " +
                     describe(v) + ")");
  }
  const std::int64_t width = shape(q)[shape(q).rank() - 1];
  DType operands = dtype(q), out = dtype(q);
  if (operands == DType::f32 && matmul_dtype_ != DType::f32) operands = matmul_dtype_;
  if (!attention_kernel_ || width == 0 || !attention_kernel_(operands, out, width)) {
    auto heads_first = [&](ValueId x) { return args.tokens_first ? transpose(x, kHeadsSwap) : x; };
    const ValueId scores = matmul(heads_first(q), heads_first(k), {.transpose_b = true, .alpha = args.scale});
    const ValueId product = matmul(args.causal ? causal_softmax(scores) : softmax(scores, -1), heads_first(v));
    return args.tokens_first ? transpose(product, kHeadsSwap) : product;
  }
  OpAttrs attrs;
  attrs.attention = args;
  const NodeId n = add_node(OpKind::attention, {cast(q, operands), cast(k, operands), cast(v, operands)}, attrs,
                            {{shape(q), out}, {rows, DType::f32}});
  return node(n).outputs[0];
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

// dout rounded to the operands' dtype once, as a mixed matmul's gradient
// rounds its dy; the gradients in out's dtype.
std::vector<ValueId> attention_grads(Graph& g, const Node& n, const std::vector<ValueId>& dys) {
  if (dys[1] != kNoGradient) throw GraphError("attention: gradients through its logsumexp output are not supported");
  if (dys[0] == kNoGradient) return {kNoGradient, kNoGradient, kNoGradient};
  const ValueId q = n.inputs[0], k = n.inputs[1], v = n.inputs[2];
  const DType kept = g.dtype(n.outputs[0]);
  const ValueId dout = g.cast(dys[0], g.dtype(q));
  const NodeId grad = g.add_node(OpKind::attention_grad, {q, k, v, n.outputs[0], n.outputs[1], dout}, n.attrs,
                                 {{g.shape(q), kept}, {g.shape(k), kept}, {g.shape(v), kept}});
  return g.node(grad).outputs;
}

// The batches and heads split alike on every operand and result; a head's
// rows and width stay whole. `operands`: how many of q's layout, then
// whether a logsumexp ([..., Tq], heads first) follows; `later`: results
// after the first, in q's layout.
ShardingRule attention_sharding_of(const Node& node, int rank, int operands, bool logsumexp, int later) {
  const bool tokens_first = node.attrs.attention.tokens_first;
  std::vector<DimRole> heads(static_cast<std::size_t>(rank));  // q's layout
  std::vector<int> later_dims(static_cast<std::size_t>(rank), -1);
  std::vector<DimRole> rows(static_cast<std::size_t>(rank - 1));  // logsumexp: [..., Tq]
  std::vector<int> rows_dims(static_cast<std::size_t>(rank - 1), -1);
  // Which of q's dimensions are batches and heads, and where logsumexp has each.
  const std::vector<std::pair<int, int>> split =
      tokens_first ? std::vector<std::pair<int, int>>{{0, 0}, {2, 1}} : [&] {
        std::vector<std::pair<int, int>> leading;
        for (int d = 0; d < rank - 2; ++d) leading.emplace_back(d, d);
        return leading;
      }();
  for (const auto& [dim, row_dim] : split) {
    heads[static_cast<std::size_t>(dim)] = {DimRole::result, dim};
    later_dims[static_cast<std::size_t>(dim)] = dim;
    rows[static_cast<std::size_t>(row_dim)] = {DimRole::result, dim};
    rows_dims[static_cast<std::size_t>(row_dim)] = dim;
  }
  std::vector<std::vector<DimRole>> roles(static_cast<std::size_t>(operands), heads);
  if (logsumexp) roles.insert(roles.begin() + 4, rows);  // attention_grad: (q, k, v, out, logsumexp, dout)
  const std::size_t count = roles.size();
  ShardingRule rule = contraction_rule(std::move(roles), 0, std::vector<bool>(count, false));
  if (!logsumexp) rule.later_results.push_back(rows_dims);  // attention's logsumexp
  for (int i = 0; i < later; ++i) rule.later_results.push_back(later_dims);
  return rule;
}

ShardingRule attention_sharding(const Graph& g, const Node& node) {
  return attention_sharding_of(node, g.shape(node.inputs[0]).rank(), 3, false, 0);
}
ShardingRule attention_grad_sharding(const Graph& g, const Node& node) {
  return attention_sharding_of(node, g.shape(node.inputs[0]).rank(), 5, true, 2);
}

// Two products of Tq x K by Tk per head forward, five backward (the scores
// again, then the gradients of the weights, v, q and k): every pair counted,
// as for the matmuls it replaces (a causal mask's skipped blocks are not).
std::int64_t attention_flops(const Graph& g, const Node& node) {
  const Shape& k = g.shape(node.inputs[1]);
  const std::int64_t keys = node.attrs.attention.tokens_first ? k[1] : k[k.rank() - 2];
  const std::int64_t products = node.kind == OpKind::attention ? 2 : 5;
  return 2 * products * g.shape(node.inputs[0]).numel() * keys;
}

}  // namespace

void ops::add_attention_rules(OpRuleTable& t) {
  entry(t, OpKind::cached_attention) = {
      nullptr,
      [](NodeRun& r) {
        r.backend.cached_attention(r.in(0), r.in(1), r.in(2), r.in(3), r.out(0), static_cast<float>(r.node.attrs.scalar));
      },
      cached_attention_sharding, cached_attention_flops};
  entry(t, OpKind::attention) = {
      attention_grads,
      [](NodeRun& r) {
        r.backend.attention(r.in(0), r.in(1), r.in(2), r.out(0), r.out(1), r.node.attrs.attention);
      },
      attention_sharding, attention_flops};
  entry(t, OpKind::attention_grad) = {
      nullptr,
      [](NodeRun& r) {
        r.backend.attention_backward(r.in(0), r.in(1), r.in(2), r.in(3), r.in(4), r.in(5), r.out(0), r.out(1),
                                     r.out(2), r.node.attrs.attention);
      },
      attention_grad_sharding, attention_flops};
}

}  // namespace tessera
