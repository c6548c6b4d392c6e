#include "engine/graph/sharding_rule.hpp"

#include <algorithm>

namespace tessera {

ShardingRule elementwise_rule(const Graph& graph, const Node& node, std::vector<bool> linear, bool additive,
                              const std::vector<int>& whole) {
  ShardingRule rule;
  rule.form = ShardingRule::Form::dims;
  rule.linear = std::move(linear);
  rule.additive = additive;
  const Shape out = graph.shape(node.outputs[0]);
  for (ValueId input : node.inputs) {
    const Shape s = graph.shape(input);
    std::vector<DimRole> roles(static_cast<std::size_t>(s.rank()));
    for (int d = 0; d < s.rank(); ++d) {
      const int j = d + out.rank() - s.rank();
      const bool kept = std::find(whole.begin(), whole.end(), j) == whole.end();
      if (j >= 0 && s[d] == out[j] && kept) roles[static_cast<std::size_t>(d)] = {DimRole::result, j};
    }
    rule.roles.push_back(std::move(roles));
  }
  return rule;
}

ShardingRule contraction_rule(std::vector<std::vector<DimRole>> roles, int summed, std::vector<bool> linear) {
  ShardingRule rule;
  rule.form = ShardingRule::Form::dims;
  rule.roles = std::move(roles);
  rule.summed = summed;
  rule.linear = std::move(linear);
  return rule;
}

ShardingRule follow_first_rule(int optimizer_state_from) {
  ShardingRule rule;
  rule.form = ShardingRule::Form::follow_first;
  rule.optimizer_state_from = optimizer_state_from;
  return rule;
}

}  // namespace tessera
