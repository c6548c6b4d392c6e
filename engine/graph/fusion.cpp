#include "engine/graph/fusion.hpp"

#include <algorithm>
#include <initializer_list>
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

// Readers of each value among the scheduled nodes, and where each node runs.
struct ScheduleReaders {
  ScheduleReaders(const Graph& graph, const std::vector<NodeId>& schedule, const std::vector<ValueId>& outputs)
      : graph(graph), schedule(schedule), outputs(outputs), readers(static_cast<std::size_t>(graph.value_count())),
        position(static_cast<std::size_t>(graph.node_count()), -1) {
    for (std::size_t i = 0; i < schedule.size(); ++i) {
      position[schedule[i]] = static_cast<int>(i);
      for (ValueId in : graph.node(schedule[i]).inputs) readers[in].push_back(schedule[i]);
    }
  }
  // The one node that reads `v`, when exactly one does and `v` is not an output.
  NodeId sole_reader(ValueId v) const {
    if (readers[v].size() != 1 || std::find(outputs.begin(), outputs.end(), v) != outputs.end()) return -1;
    return readers[v][0];
  }

  // Whether an update or cache write runs strictly between positions `from`
  // and `to`: a fused call that reads at `from` what was read at `to` would
  // then see other bytes.
  bool side_effect_between(int from, int to) const {
    for (int at = from + 1; at < to; ++at)
      if (op_info(graph.node(schedule[static_cast<std::size_t>(at)]).kind).side_effect) return true;
    return false;
  }

  // Whether a node strictly between positions `from` and `to` writes in
  // place the storage of one of `values`.
  bool writes_between(int from, int to, std::initializer_list<ValueId> values) const {
    for (int at = from + 1; at < to; ++at) {
      const Node& node = graph.node(schedule[static_cast<std::size_t>(at)]);
      for (int i : op_info(node.kind).writes) {
        const ValueId written = storage_root(graph, node.inputs[static_cast<std::size_t>(i)]);
        for (ValueId v : values)
          if (storage_root(graph, v) == written) return true;
      }
    }
    return false;
  }

  const Graph& graph;
  const std::vector<NodeId>& schedule;
  const std::vector<ValueId>& outputs;
  std::vector<std::vector<NodeId>> readers;
  std::vector<int> position;
};

// The cast to bf16 that alone reads f32 `value`, directly or through
// reshapes: the cast's output, and the reshapes and the cast (a fused call
// that writes the cast's value does them).
struct CastChain {
  ValueId value;
  std::vector<NodeId> nodes;
};
std::optional<CastChain> cast_to_bf16(const Graph& graph, const ScheduleReaders& readers, ValueId value) {
  CastChain chain;
  NodeId next = readers.sole_reader(value);
  while (next >= 0 && graph.node(next).kind == OpKind::reshape) {
    chain.nodes.push_back(next);
    next = readers.sole_reader(graph.node(next).outputs[0]);
  }
  if (next < 0 || graph.node(next).kind != OpKind::cast || graph.dtype(graph.node(next).outputs[0]) != DType::bf16)
    return std::nullopt;
  chain.nodes.push_back(next);
  chain.value = graph.node(next).outputs[0];
  return chain;
}

// Whether `v` is attention's weights (a softmax, or its cast): the product
// that reads them is left to fuse_attention.
bool attention_weights(const Graph& graph, ValueId v) {
  NodeId p = graph.value(v).producer;
  if (p >= 0 && graph.node(p).kind == OpKind::cast) p = graph.value(graph.node(p).inputs[0]).producer;
  return p >= 0 && graph.node(p).kind == OpKind::softmax;
}

}  // namespace

std::unordered_map<NodeId, Epilogue> fuse_epilogues(const Graph& graph, std::vector<NodeId>& schedule,
                                                    const std::vector<ValueId>& outputs) {
  const ScheduleReaders schedule_readers(graph, schedule, outputs);
  const auto& readers = schedule_readers.readers;
  const auto& position = schedule_readers.position;
  auto sole_reader = [&](ValueId v) -> const Node* {
    NodeId n = schedule_readers.sole_reader(v);
    return n < 0 ? nullptr : &graph.node(n);
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
          graph.dtype(add->outputs[0]) == dtype && defined_before(bias, position[n]) &&
          !schedule_readers.side_effect_between(position[n], position[readers[node.outputs[0]][0]])) {
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
    // Mixed precision: a product of bf16 operands kept in f32 that is only
    // cast to bf16, as it is or through reshapes (attention's heads): the
    // call writes the cast's value, rounding once after the bias and activation.
    if (node.kind == OpKind::matmul && dtype == DType::f32 && graph.dtype(node.inputs[0]) == DType::bf16 &&
        !attention_weights(graph, node.inputs[0]))
      if (const auto cast = cast_to_bf16(graph, schedule_readers, e.out)) {
        e.out = cast->value;
        replaced.insert(replaced.end(), cast->nodes.begin(), cast->nodes.end());
      }
    if (replaced.empty()) continue;
    for (NodeId a : replaced) absorbed[a] = true;
    fused.emplace(n, std::move(e));
  }
  // Mixed precision's casts of matmul operands into the layer norm or unary
  // op that computes them: it rounds its f32 result as it writes it.
  for (NodeId n : schedule) {
    const Node& node = graph.node(n);
    if (absorbed[n] || (node.kind != OpKind::layer_norm && node.kind != OpKind::unary) ||
        graph.dtype(node.inputs[0]) != DType::f32 || graph.dtype(node.outputs[0]) != DType::f32)
      continue;
    if (const Node* cast = sole_reader(node.outputs[0]);
        cast != nullptr && cast->kind == OpKind::cast && graph.dtype(cast->outputs[0]) == DType::bf16) {
      absorbed[readers[node.outputs[0]][0]] = true;
      fused.emplace(n, Epilogue{.out = cast->outputs[0]});
    }
  }
  std::erase_if(schedule, [&](NodeId n) { return absorbed[n]; });
  return fused;
}

std::unordered_map<NodeId, FusedAttention> fuse_attention(const Graph& graph, std::vector<NodeId>& schedule,
                                                          const std::vector<ValueId>& outputs,
                                                          const std::unordered_map<NodeId, Epilogue>& epilogues,
                                                          const FusedAttentionSupport& supported) {
  std::unordered_map<NodeId, FusedAttention> fused;
  if (!supported) return fused;
  const ScheduleReaders readers(graph, schedule, outputs);
  const std::vector<int> heads_swap{0, 2, 1, 3};
  auto producer = [&](ValueId v) -> const Node* {
    NodeId p = graph.value(v).producer;
    return p < 0 ? nullptr : &graph.node(p);
  };
  // operand = cast(transpose(x, [0, 2, 1, 3])) from f32 to bf16, or in f32
  // transpose(x, [0, 2, 1, 3]) alone, read by `reader` alone through them:
  // x [B, T, H, K], and the nodes (no cast: -1).
  struct Projected {
    ValueId x;
    NodeId transpose, cast;
  };
  auto projected = [&](ValueId operand, NodeId reader) -> std::optional<Projected> {
    if (readers.sole_reader(operand) != reader) return std::nullopt;
    NodeId cast = -1;
    ValueId swapped = operand;
    if (const Node* c = producer(operand); c != nullptr && c->kind == OpKind::cast) {
      if (graph.dtype(operand) != DType::bf16 || graph.dtype(c->inputs[0]) != DType::f32) return std::nullopt;
      cast = graph.value(operand).producer;
      swapped = c->inputs[0];
    } else if (graph.dtype(operand) != DType::f32) {
      return std::nullopt;
    }
    const Node* t = producer(swapped);
    if (t == nullptr || t->kind != OpKind::transpose || t->attrs.axes != heads_swap ||
        (cast >= 0 && readers.sole_reader(swapped) != cast))
      return std::nullopt;
    return Projected{t->inputs[0], graph.value(swapped).producer, cast};
  };

  std::vector<bool> absorbed(static_cast<std::size_t>(graph.node_count()), false);
  for (NodeId n : schedule) {
    const Node& scores = graph.node(n);
    if (scores.kind != OpKind::matmul || epilogues.contains(n)) continue;
    const MatmulArgs& qk = scores.attrs.matmul;
    if (qk.transpose_a || !qk.transpose_b || qk.activation != Activation::none) continue;
    const ValueId q = scores.inputs[0], k = scores.inputs[1];
    const Shape& qs = graph.shape(q);
    const Shape& ks = graph.shape(k);
    if (qs.rank() < 2 || ks.rank() != qs.rank()) continue;  // no broadcast batch axes
    bool same_leading = true;
    for (int i = 0; i < qs.rank() - 2; ++i) same_leading = same_leading && qs[i] == ks[i];
    if (!same_leading) continue;

    const NodeId softmax_node = readers.sole_reader(scores.outputs[0]);
    if (softmax_node < 0) continue;
    const Node& softmax = graph.node(softmax_node);
    if (softmax.kind != OpKind::softmax || softmax.attrs.log || softmax.attrs.axis != qs.rank() - 1) continue;
    if (softmax.attrs.causal && qs[qs.rank() - 2] > ks[ks.rank() - 2]) continue;
    std::vector<NodeId> replaced{n, softmax_node};
    ValueId weights = softmax.outputs[0];
    NodeId next = readers.sole_reader(weights);
    if (next >= 0 && graph.node(next).kind == OpKind::cast) {  // mixed precision: weights to bf16
      replaced.push_back(next);
      weights = graph.node(next).outputs[0];
      next = readers.sole_reader(weights);
    }
    if (next < 0 || epilogues.contains(next)) continue;
    const Node& attended = graph.node(next);
    if (attended.kind != OpKind::matmul || attended.inputs[0] != weights) continue;
    const MatmulArgs& wv = attended.attrs.matmul;
    if (wv.transpose_a || wv.transpose_b || wv.alpha != 1.0f || wv.activation != Activation::none) continue;
    const ValueId v = attended.inputs[1];
    if (graph.shape(v) != ks || graph.dtype(v) != graph.dtype(q) || graph.dtype(weights) != graph.dtype(q)) continue;

    FusedAttention f{.q = q, .k = k, .v = v, .out = attended.outputs[0], .out_shape = graph.shape(attended.outputs[0]),
                     .args = {.scale = qk.alpha, .causal = softmax.attrs.causal, .multiply = graph.dtype(q)}};
    // The head transposes and casts around it, where the call can do them as it reads and writes.
    const auto pq = projected(q, n), pk = projected(k, n), pv = projected(v, next);
    DType stored = graph.dtype(q);
    if (pq && pk && pv && supported(DType::f32, f.args.multiply, graph.dtype(f.out), qs[qs.rank() - 1])) {
      stored = DType::f32;
      f.q = pq->x;
      f.k = pk->x;
      f.v = pv->x;
      f.args.q_tokens_first = f.args.k_tokens_first = f.args.v_tokens_first = true;
      for (const Projected* p : {&*pq, &*pk, &*pv}) {
        replaced.push_back(p->transpose);
        if (p->cast >= 0) replaced.push_back(p->cast);
      }
    }
    if (const NodeId back = readers.sole_reader(f.out); back >= 0 && graph.node(back).kind == OpKind::transpose &&
                                                        graph.node(back).attrs.axes == heads_swap) {
      f.out = graph.node(back).outputs[0];
      f.args.out_tokens_first = true;
      replaced.push_back(back);
    }
    f.out_shape = graph.shape(f.out);
    if (const auto cast = cast_to_bf16(graph, readers, f.out);
        cast && graph.dtype(f.out) == DType::f32 && supported(stored, f.args.multiply, DType::bf16, qs[qs.rank() - 1])) {
      f.out = cast->value;
      replaced.insert(replaced.end(), cast->nodes.begin(), cast->nodes.end());
    }
    if (!supported(stored, f.args.multiply, graph.dtype(f.out), qs[qs.rank() - 1])) continue;
    // Not through what an earlier fused call took over: a value it no longer
    // writes (its product, where it writes the product's transpose instead).
    auto taken = [&](ValueId read) { return graph.value(read).producer >= 0 && absorbed[graph.value(read).producer]; };
    if (std::any_of(replaced.begin(), replaced.end(), [&](NodeId r) { return absorbed[r]; }) || taken(f.q) ||
        taken(f.k) || taken(f.v))
      continue;
    // The fused call reads its operands where the second matmul ran: no in-place
    // write (an update, a cache write) may come between their first reader and it.
    int first = readers.position[next];
    for (NodeId r : replaced) first = std::min(first, readers.position[r]);
    if (readers.side_effect_between(first, readers.position[next])) continue;
    for (NodeId r : replaced) absorbed[r] = true;
    fused.emplace(next, f);
  }
  std::erase_if(schedule, [&](NodeId n) { return absorbed[n]; });
  return fused;
}

ValueId storage_root(const Graph& graph, ValueId v) {
  for (;;) {
    NodeId producer = graph.value(v).producer;
    if (producer < 0) return v;
    const Node& node = graph.node(producer);
    if (!op_info(node.kind).view) return v;
    v = node.inputs[0];
  }
}

std::unordered_map<NodeId, UpdateProduct> fuse_update_products(const Graph& graph, std::vector<NodeId>& schedule,
                                                               const std::vector<ValueId>& outputs,
                                                               const std::unordered_map<NodeId, Epilogue>& epilogues,
                                                               const UpdateProductSupport& supported) {
  std::unordered_map<NodeId, UpdateProduct> fused;
  if (!supported) return fused;
  ScheduleReaders readers(graph, schedule, outputs);
  std::vector<bool> absorbed(static_cast<std::size_t>(graph.node_count()), false);
  for (NodeId n : schedule) {
    const Node& update = graph.node(n);
    if (update.kind != OpKind::adam_update && update.kind != OpKind::sgd_update) continue;
    const ValueId grad = update.inputs[1];
    const NodeId p = graph.value(grad).producer;
    if (p < 0 || readers.position[p] < 0 || graph.node(p).kind != OpKind::matmul || epilogues.contains(p) ||
        readers.sole_reader(grad) != n)
      continue;
    const Node& product = graph.node(p);
    const MatmulArgs& args = product.attrs.matmul;
    const ValueId a = product.inputs[0], b = product.inputs[1];
    if (!args.transpose_a || args.transpose_b || args.activation != Activation::none || args.alpha != 1.0f ||
        graph.dtype(a) != DType::f32 || graph.dtype(b) != DType::f32 || graph.dtype(grad) != DType::f32 ||
        !supported(DType::f32, graph.shape(a), graph.shape(b)))
      continue;
    // The update reads a and b where it runs, later than the matmul did.
    if (readers.writes_between(readers.position[p], readers.position[n], {a, b})) continue;
    absorbed[p] = true;
    fused.emplace(n, UpdateProduct{a, b});
  }
  std::erase_if(schedule, [&](NodeId n) { return absorbed[n]; });
  return fused;
}

std::unordered_map<NodeId, ValueId> fuse_conv_bias_gradients(const Graph& graph, std::vector<NodeId>& schedule,
                                                             const std::vector<ValueId>& outputs,
                                                             const ConvBiasGradientSupport& supported) {
  std::unordered_map<NodeId, ValueId> fused;
  if (!supported) return fused;
  const ScheduleReaders readers(graph, schedule, outputs);
  // The sum over N, OH and OW of dy [N, OH, OW, F] among dy's readers.
  auto bias_sum_of = [&](ValueId dy) -> NodeId {
    for (NodeId r : readers.readers[dy]) {
      const Node& node = graph.node(r);
      if (node.kind != OpKind::reduce || node.attrs.reduce != ReduceOp::sum) continue;
      std::vector<int> axes;
      for (int a : node.attrs.axes) axes.push_back(graph.shape(dy).normalize_axis(a));
      std::sort(axes.begin(), axes.end());
      if (axes == std::vector<int>{0, 1, 2}) return r;
    }
    return -1;
  };
  std::vector<NodeId> replaced_by(static_cast<std::size_t>(graph.node_count()), -1);  // a sum: its weight gradient
  std::vector<bool> moved(static_cast<std::size_t>(graph.node_count()), false);
  for (NodeId n : schedule) {
    const Node& node = graph.node(n);
    if (node.kind != OpKind::conv2d_grad_weight) continue;
    const ValueId x = node.inputs[0], dy = node.inputs[1];
    const DType dtype = graph.dtype(dy);
    if (dtype != DType::f32 || graph.dtype(x) != dtype ||
        !supported(dtype, graph.shape(x), graph.shape(dy), graph.shape(node.outputs[0])))
      continue;
    const NodeId sum = bias_sum_of(dy);
    if (sum < 0 || replaced_by[sum] >= 0) continue;
    const int at = readers.position[sum], here = readers.position[n];
    // Run at the sum's place when that is earlier: the sum's readers may run
    // before the weight gradient's place (the bias's update does).
    if (at < here) {
      const NodeId producer = graph.value(x).producer;
      if (producer >= 0 && readers.position[producer] >= at) continue;
      if (readers.writes_between(at, here, {x, dy})) continue;
      moved[n] = true;
    }
    replaced_by[sum] = n;
    fused.emplace(n, graph.node(sum).outputs[0]);
  }
  std::vector<NodeId> order;
  for (NodeId n : schedule) {
    if (replaced_by[n] >= 0) {
      if (moved[replaced_by[n]]) order.push_back(replaced_by[n]);
      continue;
    }
    if (!moved[n]) order.push_back(n);
  }
  schedule = std::move(order);
  return fused;
}

std::unordered_map<NodeId, ConvReluGradient> fuse_conv_relu_gradients(const Graph& graph,
                                                                      std::vector<NodeId>& schedule,
                                                                      const std::vector<ValueId>& outputs,
                                                                      const ConvReluGradientSupport& supported) {
  std::unordered_map<NodeId, ConvReluGradient> fused;
  if (!supported) return fused;
  const ScheduleReaders readers(graph, schedule, outputs);
  std::vector<bool> absorbed(static_cast<std::size_t>(graph.node_count()), false);
  for (NodeId n : schedule) {
    const Node& node = graph.node(n);
    if (node.kind != OpKind::conv2d_grad_weight) continue;
    const ValueId dy = node.inputs[1];
    const NodeId p = graph.value(dy).producer;
    if (p < 0 || readers.position[p] < 0 || readers.sole_reader(dy) != n) continue;
    const Node& relu = graph.node(p);  // unary_grad (y, g) -> g where y > 0
    if (relu.kind != OpKind::unary_grad || relu.attrs.unary != UnaryOp::relu) continue;
    const ValueId y = relu.inputs[0], g = relu.inputs[1];
    if (graph.dtype(dy) != DType::f32 || graph.dtype(y) != DType::f32 || graph.dtype(g) != DType::f32 ||
        graph.dtype(node.inputs[0]) != DType::f32 || graph.shape(y) != graph.shape(dy) ||
        !supported(DType::f32, graph.shape(node.outputs[0])))
      continue;
    // The weight gradient reads y and g where it runs, later than the ReLU's gradient did.
    if (readers.writes_between(readers.position[p], readers.position[n], {y, g})) continue;
    absorbed[p] = true;
    fused.emplace(n, ConvReluGradient{y, g});
  }
  std::erase_if(schedule, [&](NodeId n) { return absorbed[n]; });
  return fused;
}

}  // namespace tessera
