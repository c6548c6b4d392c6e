// Layer arguments as Keras takes them, and the errors of layers that cannot
// take their arguments or inputs: each names where the config declares it.
#include <doctest/doctest.h>

#include "engine/config/config.hpp"
#include "engine/graph/autodiff.hpp"
#include "engine/model.hpp"

using namespace tessera;

namespace {

Model parse_model(const std::string& yaml) { return Model::from_config(ConfigNode::parse(yaml, "model.yaml")["model"]); }

// The ConfigError of parsing `yaml`, or of tracing it when parsing succeeds.
std::string error_of(const std::string& yaml, bool training = false) {
  try {
    Model m = parse_model(yaml);
    VariableStore store;
    Graph g;
    m.trace(g, 2, training, store, 0);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }


}  // namespace

TEST_CASE("TransformerBlock rejects an ff_dim below 1 at its node") {
  std::string e = error_of(R"(model:
  inputs: [{shape: [4, 8]}]
  layers:
    - {type: TransformerBlock, num_heads: 2, key_dim: 4, ff_dim: 0}
)");
  CHECK(contains(e, "model.yaml:4:"));
  CHECK(contains(e, "model.layers[0].ff_dim: ff_dim must be >= 1"));
}

TEST_CASE("the gradient of a matmul with a weight shared over batch axes allows a zero-size last axis") {
  for (auto [k, n] : {std::pair<std::int64_t, std::int64_t>{4, 0}, {0, 4}}) {
    CAPTURE(k);
    Graph g;
    ValueId x = g.input("x", {2, 3, k});
    ValueId w = g.variable("w", {k, n});
    ValueId loss = g.reduce(ReduceOp::sum, g.matmul(x, w), {0, 1, 2});
    auto grads = append_gradients(g, loss, {w});
    CHECK(g.shape(grads.at(w)) == Shape{k, n});
  }
}
