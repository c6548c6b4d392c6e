#include "engine/graph/memory_plan.hpp"

#include <algorithm>

namespace tessera {
namespace {

constexpr std::size_t kAlignment = 64;

// Side effects on variables: scheduled though nothing reads their (absent) outputs.
bool is_update(OpKind kind) {
  return kind == OpKind::sgd_update || kind == OpKind::adam_update || kind == OpKind::moving_average ||
         kind == OpKind::all_gather_into;
}
bool is_external(OpKind kind) { return kind == OpKind::input || kind == OpKind::variable; }

std::size_t aligned_bytes(const Value& v) {
  auto bytes = static_cast<std::size_t>(v.shape.numel()) * dtype_size(v.dtype);
  return (std::max<std::size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
}

}  // namespace

MemoryPlan plan_memory(const Graph& graph, const std::vector<ValueId>& outputs) {
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
    bool live = is_update(node.kind);
    for (ValueId out : node.outputs) live = live || needed_value[out];
    if (!live) continue;
    needed_node[n] = true;
    for (ValueId in : node.inputs) needed_value[in] = true;
  }
  for (NodeId n = 0; n < graph.node_count(); ++n)
    if (needed_node[n]) plan.schedule.push_back(n);

  // Lifetimes, with views (reshape, block_view) sharing and extending their input's storage.
  int end = static_cast<int>(plan.schedule.size());
  for (int pos = 0; pos < end; ++pos) {
    const Node& node = graph.node(plan.schedule[pos]);
    for (ValueId in : node.inputs) {
      ValueId root = plan.storage_of[in];
      plan.last_use[root] = std::max(plan.last_use[root], pos);
    }
    for (ValueId out : node.outputs) {
      if (node.kind == OpKind::reshape || node.kind == OpKind::block_view) plan.storage_of[out] = plan.storage_of[node.inputs[0]];
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
    if (is_external(node.kind)) continue;
    for (ValueId out : node.outputs)
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
