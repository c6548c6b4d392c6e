// Layer arguments as Keras takes them, and the errors of layers that cannot
// take their arguments or inputs: each names where the config declares it.
#include <doctest/doctest.h>

#include <set>

#include "engine/config/config.hpp"
#include "engine/graph/autodiff.hpp"
#include "layers/model.hpp"

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

// The seeds of the dropout ops of `yaml`'s model traced for training.
std::vector<std::uint64_t> dropout_seeds(const std::string& yaml) {
  VariableStore store;
  Graph g;
  parse_model(yaml).trace(g, 2, /*training=*/true, store, 0);
  std::vector<std::uint64_t> seeds;
  for (int i = 0; i < g.node_count(); ++i)
    if (g.node(i).kind == OpKind::dropout) seeds.push_back(g.node(i).attrs.seed);
  return seeds;
}

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
  for (const auto& kn : {std::pair<std::int64_t, std::int64_t>{4, 0}, {0, 4}}) {
    const std::int64_t k = kn.first, n = kn.second;
    CAPTURE(k);
    Graph g;
    ValueId x = g.input("x", {2, 3, k});
    ValueId w = g.variable("w", {k, n});
    ValueId loss = g.reduce(ReduceOp::sum, g.matmul(x, w), {0, 1, 2});
    auto grads = append_gradients(g, loss, {w});
    CHECK(g.shape(grads.at(w)) == Shape{k, n});
  }
}

TEST_CASE("a layer name with a slash is a config error at the name") {
  std::string e = error_of(R"(model:
  inputs: [{name: x, shape: [4]}]
  layers:
    - {type: Dense, units: 4, name: a/b}
)");
  CHECK(contains(e, "model.yaml:4:"));
  CHECK(contains(e, "model.layers[0].name: name 'a/b' contains '/'"));
  CHECK(contains(error_of("model: {name: m/n, inputs: [{shape: [4]}], layers: [{type: Dense, units: 2}]}"),
                 "model.name: name 'm/n' contains '/'"));
}

TEST_CASE("Conv2D strides and pooling pool_size and strides take an int or a pair") {
  Model m = parse_model(R"(model:
  inputs: [{shape: [8, 8, 1]}]
  layers:
    - {type: Conv2D, filters: 2, kernel_size: [3, 1], strides: [2, 1]}
    - {type: MaxPooling2D, pool_size: [1, 2]}
    - {type: AveragePooling2D, pool_size: 2, strides: [1, 2], padding: same}
    - {type: Conv2D, filters: 2, kernel_size: 1, strides: 2}
)");
  VariableStore store;
  Graph g;
  auto traced = m.trace(g, 2, false, store, 0);
  // [8, 8] -> conv [3, 8] -> max [3, 4] -> avg (same) [3, 2] -> conv [2, 1]
  CHECK(g.shape(traced.layer_outputs[0].second) == Shape{2, 3, 8, 2});
  CHECK(g.shape(traced.layer_outputs[1].second) == Shape{2, 3, 4, 2});
  CHECK(g.shape(traced.layer_outputs[2].second) == Shape{2, 3, 2, 2});
  CHECK(g.shape(traced.output) == Shape{2, 2, 1, 2});
  CHECK(contains(error_of("model: {inputs: [{shape: [4, 4, 1]}], layers: [{type: MaxPooling2D, pool_size: [2, 2, 2]}]}"),
                 "model.layers[0].pool_size: expected an integer or a pair [h, w], got 3 values"));
}

TEST_CASE("TransformerBlock's three dropouts draw from distinct seeds") {
  auto seeds = dropout_seeds(R"(model:
  inputs: [{shape: [4, 8]}]
  layers:
    - {type: TransformerBlock, num_heads: 2, key_dim: 4, ff_dim: 16, dropout: 0.5}
)");
  CHECK(seeds.size() == 3);
  CHECK(std::set<std::uint64_t>(seeds.begin(), seeds.end()).size() == 3);
}

TEST_CASE("a window larger than the padded input is a shape error naming the sizes") {
  Graph g;
  ValueId x = g.input("x", {1, 2, 2, 1});
  try {
    g.conv2d(x, g.variable("w", {5, 5, 1, 1}), {.stride_h = 4, .stride_w = 4});
    FAIL("expected a ShapeError");
  } catch (const ShapeError& e) {
    CHECK(contains(e.what(), "kernel 5x5"));
    CHECK(contains(e.what(), "2x2 after padding"));
  }
  CHECK_THROWS_AS(g.pool2d(g.input("y", {1, 1, 1, 1}), {.window_h = 2, .window_w = 2, .stride_h = 2, .stride_w = 2}),
                  ShapeError);
  // A layer's: the layer and where it is declared.
  std::string e = error_of(R"(model:
  inputs: [{shape: [1, 1, 1]}]
  layers:
    - {type: MaxPooling2D}
)");
  CHECK(contains(e, "model.yaml:4:"));
  CHECK(contains(e, "layer 'max_pooling2d' (MaxPooling2D)"));
  CHECK(contains(e, "window 2x2 is larger than the padded input x[2, 1, 1, 1], 1x1 after padding"));
}

TEST_CASE("Concatenate rejects the batch axis however it is written and an axis out of range") {
  const char* yaml = R"(model:
  inputs: [{name: x, shape: [4]}]
  layers:
    - {type: Concatenate, name: cat, axis: AXIS, inputs: [x, x]}
)";
  auto with_axis = [&](const std::string& axis) {
    std::string text = yaml;
    return text.replace(text.find("AXIS"), 4, axis);
  };
  std::string e = error_of(with_axis("-2"));
  CHECK(contains(e, "model.yaml:4:"));
  CHECK(contains(e, "layer 'cat' (Concatenate): axis -2 is the batch axis"));
  e = error_of(with_axis("5"));
  CHECK(contains(e, "model.yaml:4:"));
  CHECK(contains(e, "layer 'cat' (Concatenate): axis 5 is out of range"));
  CHECK(error_of(with_axis("-1")) == "no error");
}

TEST_CASE("a layer that cannot take its inputs is an error at its config with its name") {
  std::string e = error_of(R"(model:
  inputs: [{name: ids, shape: [4]}]
  layers:
    - {type: Embedding, input_dim: 10, output_dim: 3}
)");
  CHECK(contains(e, "model.yaml:4:7: model.layers[0]: layer 'embedding' (Embedding): "));
  CHECK(contains(e, "must be i32 or i64"));

  e = error_of(R"(model:
  inputs: [{shape: [4]}]
  layers:
    - {type: Dense, units: 3}
    - {type: Conv2D, filters: 2, kernel_size: 3}
)");
  CHECK(contains(e, "model.yaml:5:7: model.layers[1]: layer 'conv2d' (Conv2D): input must be [batch, height, width, channels]"));

  e = error_of(R"(model:
  inputs: [{shape: [5, 8]}]
  layers:
    - {type: PositionEmbedding, sequence_length: 4}
)");
  CHECK(contains(e, "model.yaml:4:7: model.layers[0]: layer 'position_embedding' (PositionEmbedding): input must be [batch, sequence of at most 4, features]"));
}

TEST_CASE("Dropout takes a seed that picks its mask stream") {
  auto seed_of = [](const std::string& args) {
    auto seeds = dropout_seeds("model: {inputs: [{shape: [4]}], layers: [{type: Dropout, rate: 0.5" + args + "}]}");
    REQUIRE(seeds.size() == 1);
    return seeds[0];
  };
  CHECK(seed_of(", seed: 7") == seed_of(", seed: 7"));
  CHECK(seed_of(", seed: 7") != seed_of(", seed: 8"));
  CHECK(seed_of(", seed: 0") == seed_of(""));
  CHECK(contains(error_of("model: {inputs: [{shape: [4]}], layers: [{type: Dropout, rate: 0.5, seed: -1}]}"),
                 "model.layers[0].seed: seed must be >= 0"));
}
