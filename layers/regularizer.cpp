#include "layers/regularizer.hpp"

#include <cmath>
#include <numeric>

#include "engine/config/config.hpp"
#include "layers/layer.hpp"

namespace tessera {

Regularizer parse_regularizer(const ConfigNode& node) {
  constexpr double kKerasDefault = 0.01;
  if (node.is_scalar()) {
    const auto name = node.as<std::string>();
    if (name == "l1") return {kKerasDefault, 0};
    if (name == "l2") return {0, kKerasDefault};
    node.fail_unknown("regularizer", name, {"l1", "l2"});
  }
  node.expect_keys({"l1", "l2"});
  Regularizer r;
  for (const char* key : {"l1", "l2"}) {
    auto factor = node.find(key);
    if (!factor) continue;
    const auto value = factor->as<double>();
    if (!(std::isfinite(value) && value >= 0)) factor->fail("a regularization factor must be a finite number >= 0");
    (std::string(key) == "l1" ? r.l1 : r.l2) = value;
  }
  return r;
}

void read_regularizers(const ConfigNode& args, Layer& layer) {
  for (const char* variable : {"kernel", "bias"})
    if (auto node = args.find(std::string(variable) + "_regularizer")) layer.set_regularizer(variable, parse_regularizer(*node));
}

ValueId regularization_penalty(Graph& g, const std::vector<std::pair<ValueId, Regularizer>>& regularized) {
  ValueId total = g.fill({}, 0.0);
  for (const auto& [w, r] : regularized) {
    std::vector<int> axes(static_cast<std::size_t>(g.shape(w).rank()));
    std::iota(axes.begin(), axes.end(), 0);
    if (r.l1 > 0) total = g.add(total, g.scale(g.reduce(ReduceOp::sum, g.unary(UnaryOp::abs, w), axes), r.l1));
    if (r.l2 > 0) total = g.add(total, g.scale(g.reduce(ReduceOp::sum, g.mul(w, w), axes), r.l2));
  }
  return total;
}

}  // namespace tessera
