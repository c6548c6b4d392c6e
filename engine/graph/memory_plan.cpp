#include "engine/graph/memory_plan.hpp"

#include <algorithm>

namespace tessera {
namespace {

constexpr std::size_t kAlignment = 64;

// Moves every update node to just after the last node it must follow: the
// producers of its inputs, and every earlier node that reads or writes what it
// writes. A parameter is then updated as soon as its gradient is final, while
// the gradient is still in cache, and the gradient's bytes are free for the
// rest of the backward pass (an optimizer fused into backward, as in
// PyTorch's optimizer-in-backward). Each update still follows every read of
// the old value, so a step computes exactly what it computed before.
// Leaves (inputs and variables, bound rather than computed) go first, so that
// optimizer state created after the backward pass holds nothing back; and so
// do views of leaves (attention's bias [H, K] seen as [H * K]), which cost
// nothing and can then be a matmul's fused bias (fusion.hpp): the matmul
// comes before them in the graph's order.
std::vector<NodeId> updates_early(const Graph& graph, const std::vector<NodeId>& schedule) {
  std::vector<bool> first(static_cast<std::size_t>(graph.node_count()), false);
  auto leaf = [&](ValueId v) { return graph.value(v).producer >= 0 && first[graph.value(v).producer]; };
  std::vector<NodeId> order;
  order.reserve(schedule.size());
  for (NodeId n : schedule) {  // in the graph's order: a view comes after what it views
    const Node& node = graph.node(n);
    first[n] = op_info(node.kind).bound ||
               (op_info(node.kind).view && std::all_of(node.inputs.begin(), node.inputs.end(), leaf));
    if (first[n]) order.push_back(n);
  }
  for (NodeId n : schedule) {
    const Node& node = graph.node(n);
    if (first[n]) continue;
    if (!op_info(node.kind).side_effect) {
      order.push_back(n);
      continue;
    }
    std::vector<ValueId> written;
    for (int i : op_info(node.kind).writes) written.push_back(storage_root(graph, node.inputs[static_cast<std::size_t>(i)]));
    auto touches_written = [&](const Node& other) {
      auto hit = [&](ValueId v) {
        return std::find(written.begin(), written.end(), storage_root(graph, v)) != written.end();
      };
      for (ValueId in : other.inputs)
        if (hit(in)) return true;
      for (ValueId out : other.outputs)
        if (hit(out)) return true;
      return false;
    };
    auto produces_input = [&](const Node& other) {
      for (ValueId out : other.outputs)
        if (std::find(node.inputs.begin(), node.inputs.end(), out) != node.inputs.end()) return true;
      return false;
    };
    std::size_t at = order.size();
    while (at > 0) {
      const Node& other = graph.node(order[at - 1]);
      if (produces_input(other) || touches_written(other)) break;
      --at;
    }
    order.insert(order.begin() + static_cast<std::ptrdiff_t>(at), n);
  }
  return order;
}

std::size_t aligned_bytes(const Value& v) {
  auto bytes = static_cast<std::size_t>(v.shape.numel()) * dtype_size(v.dtype);
  return (std::max<std::size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
}

}  // namespace

std::vector<ValueId> MemoryPlan::reads(const Graph& graph, NodeId n) const {
  if (auto a = attentions.find(n); a != attentions.end()) return {a->second.q, a->second.k, a->second.v};
  std::vector<ValueId> in = graph.node(n).inputs;
  if (auto u = update_products.find(n); u != update_products.end()) {  // a and b instead of the gradient
    in[1] = u->second.a;
    in.push_back(u->second.b);
  }
  if (auto r = conv_relu_gradients.find(n); r != conv_relu_gradients.end()) {  // y and the gradient at y instead of dy
    in[1] = r->second.dy;
    in.push_back(r->second.relu_output);
  }
  if (auto e = epilogues.find(n); e != epilogues.end() && e->second.bias >= 0) in.push_back(e->second.bias);
  return in;
}

std::vector<ValueId> MemoryPlan::writes(const Graph& graph, NodeId n) const {
  if (auto e = epilogues.find(n); e != epilogues.end()) {  // the fused call writes e.out instead of outputs[0]
    std::vector<ValueId> out = graph.node(n).outputs;
    out[0] = e->second.out;
    return out;
  }
  if (auto a = attentions.find(n); a != attentions.end()) return {a->second.out};
  if (auto b = conv_bias_gradients.find(n); b != conv_bias_gradients.end()) return {graph.node(n).outputs[0], b->second};
  return graph.node(n).outputs;
}

MemoryPlan plan_memory(const Graph& graph, const std::vector<ValueId>& outputs,
                       const FusedAttentionSupport& attention, const UpdateProductSupport& update_products,
                       const ConvBiasGradientSupport& conv_bias_gradients,
                       const ConvReluGradientSupport& conv_relu_gradients) {
  auto values = static_cast<std::size_t>(graph.value_count());
  MemoryPlan plan;
  plan.offset.assign(values, MemoryPlan::kExternal);
  plan.storage_of.resize(values);
  plan.first_use.assign(values, -1);
  plan.last_use.assign(values, -1);
  for (std::size_t v = 0; v < values; ++v) plan.storage_of[v] = static_cast<ValueId>(v);

  // Live nodes: ancestors of the outputs and of every update node.
  std::vector<bool> needed_value(values, false), needed_node(static_cast<std::size_t>(graph.node_count()), false);
  for (ValueId v : outputs) needed_value[v] = true;
  for (NodeId n = graph.node_count() - 1; n >= 0; --n) {
    const Node& node = graph.node(n);
    bool live = op_info(node.kind).side_effect;  // scheduled though nothing reads its (absent) outputs
    for (ValueId out : node.outputs) live = live || needed_value[out];
    if (!live) continue;
    needed_node[n] = true;
    for (ValueId in : node.inputs) needed_value[in] = true;
  }
  std::vector<NodeId> needed;
  for (NodeId n = 0; n < graph.node_count(); ++n)
    if (needed_node[n]) needed.push_back(n);
  plan.schedule = updates_early(graph, needed);
  plan.epilogues = fuse_epilogues(graph, plan.schedule, outputs);
  plan.attentions = fuse_attention(graph, plan.schedule, outputs, plan.epilogues, attention);
  plan.update_products = fuse_update_products(graph, plan.schedule, outputs, plan.epilogues, update_products);
  plan.conv_bias_gradients = fuse_conv_bias_gradients(graph, plan.schedule, outputs, conv_bias_gradients);
  plan.conv_relu_gradients = fuse_conv_relu_gradients(graph, plan.schedule, outputs, conv_relu_gradients);

  // Lifetimes, with views (reshape, block_view) sharing and extending their input's storage.
  int end = static_cast<int>(plan.schedule.size());
  for (int pos = 0; pos < end; ++pos) {
    const Node& node = graph.node(plan.schedule[pos]);
    for (ValueId in : plan.reads(graph, plan.schedule[pos])) {
      ValueId root = plan.storage_of[in];
      plan.last_use[root] = std::max(plan.last_use[root], pos);
    }
    for (ValueId out : plan.writes(graph, plan.schedule[pos])) {
      if (op_info(node.kind).view) plan.storage_of[out] = plan.storage_of[node.inputs[0]];
      ValueId root = plan.storage_of[out];
      if (plan.first_use[root] < 0) plan.first_use[root] = pos;
      plan.last_use[root] = std::max(plan.last_use[root], pos);
    }
  }
  for (ValueId v : outputs) plan.last_use[plan.storage_of[v]] = end;

  // Greedy placement, largest first: the lowest offset that overlaps no placed
  // value whose lifetime intersects (the arena planner of TFLite works so).
  std::vector<ValueId> order;
  for (NodeId n : plan.schedule) {
    const Node& node = graph.node(n);
    if (op_info(node.kind).bound) continue;
    for (ValueId out : plan.writes(graph, n))
      if (plan.storage_of[out] == out) order.push_back(out);
  }
  std::stable_sort(order.begin(), order.end(), [&](ValueId a, ValueId b) {
    return aligned_bytes(graph.value(a)) > aligned_bytes(graph.value(b));
  });
  std::vector<ValueId> placed;
  for (ValueId v : order) {
    std::size_t bytes = aligned_bytes(graph.value(v));
    plan.unshared_bytes += bytes;
    std::vector<std::pair<std::size_t, std::size_t>> busy;  // [begin, end) of overlapping values
    for (ValueId p : placed)
      if (plan.first_use[p] <= plan.last_use[v] && plan.first_use[v] <= plan.last_use[p]) {
        auto begin = static_cast<std::size_t>(plan.offset[p]);
        busy.emplace_back(begin, begin + aligned_bytes(graph.value(p)));
      }
    std::sort(busy.begin(), busy.end());
    std::size_t offset = 0;
    for (auto [begin, finish] : busy) {
      if (offset + bytes <= begin) break;
      offset = std::max(offset, finish);
    }
    plan.offset[v] = static_cast<std::int64_t>(offset);
    plan.arena_bytes = std::max(plan.arena_bytes, offset + bytes);
    placed.push_back(v);
  }
  for (std::size_t v = 0; v < values; ++v)
    if (plan.storage_of[v] != static_cast<ValueId>(v)) plan.offset[v] = plan.offset[plan.storage_of[v]];
  return plan;
}

}  // namespace tessera
