// Models from YAML: Keras naming and variable paths, Sequential and Functional
// graphs, and the errors of bad model configs.
#include <doctest/doctest.h>

#include <cmath>

#include "engine/config/config.hpp"
#include "engine/graph/executor.hpp"
#include "layers/model.hpp"
#include "tests/test_util.hpp"
#include "tests/source_tree.hpp"

using namespace tessera;

namespace {

Model parse_model(const std::string& yaml) { return Model::from_config(ConfigNode::parse(yaml, "model.yaml")["model"]); }

std::string error_of(const std::string& yaml) {
  try {
    parse_model(yaml);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

std::vector<std::string> paths(const VariableStore& store) {
  std::vector<std::string> out;
  for (const auto& v : store.variables()) out.push_back(v.path);
  return out;
}

}  // namespace

TEST_CASE("a sequential model numbers layers per type and prefixes paths with its name") {
  Model m = parse_model(R"(
model:
  inputs: [{name: image, shape: [28, 28, 1]}]
  layers:
    - {type: Conv2D, filters: 4, kernel_size: 3, activation: relu}
    - {type: MaxPooling2D}
    - {type: Flatten}
    - {type: Dense, units: 8, activation: relu}
    - {type: Dense, units: 10}
)");
  CHECK(m.sequential());
  CHECK(m.name() == "sequential");
  VariableStore store;
  Graph g;
  auto traced = m.trace(g, 5, false, store, 0);
  CHECK(g.shape(traced.output) == Shape{5, 10});
  CHECK(paths(store) == std::vector<std::string>{"sequential/conv2d/kernel", "sequential/conv2d/bias",
                                                 "sequential/dense/kernel", "sequential/dense/bias",
                                                 "sequential/dense_1/kernel", "sequential/dense_1/bias"});
  CHECK(store.find("sequential/conv2d/kernel")->value.shape() == Shape{3, 3, 1, 4});
  CHECK(store.find("sequential/dense/kernel")->axis_roles == std::vector<std::string>{"in", "out"});
  CHECK(m.summary(store, 0).find("max_pooling2d (MaxPooling2D)") != std::string::npos);
}

TEST_CASE("the reference MLP has 1,863,690 parameters and the CNN 1,199,882") {
  for (const auto& zoo_model : {std::pair{"mlp.yaml", 1863690}, std::pair{"cnn.yaml", 1199882}}) {
    const auto [file, expected] = zoo_model;
    CAPTURE(zoo_model.first);
    ConfigNode zoo = ConfigNode::load_file(test::source_path(std::string("models/") + file));
    Model m = Model::from_config(zoo["model"]);
    VariableStore store;
    m.build(store, 0);
    CHECK(store.parameter_count() == expected);
  }
}

TEST_CASE("a functional model is a DAG of named layers with unprefixed paths") {
  Model m = parse_model(R"(
model:
  name: residual
  inputs: [{name: x, shape: [6]}]
  layers:
    - {type: Dense, units: 6, name: branch, inputs: [x]}
    - {type: Add, name: sum, inputs: [x, branch]}
    - {type: LayerNormalization, inputs: [sum]}
  outputs: [layer_normalization]
)");
  CHECK_FALSE(m.sequential());
  VariableStore store;
  Graph g;
  auto traced = m.trace(g, 3, false, store, 0);
  CHECK(g.shape(traced.output) == Shape{3, 6});
  CHECK(paths(store) == std::vector<std::string>{"branch/kernel", "branch/bias", "layer_normalization/gamma",
                                                 "layer_normalization/beta"});
}

TEST_CASE("the same seed initialises the same weights and another seed others") {
  const char* yaml = "model: {inputs: [{shape: [4]}], layers: [{type: Dense, units: 3}]}";
  VariableStore a, b, c;
  parse_model(yaml).build(a, 7);
  parse_model(yaml).build(b, 7);
  parse_model(yaml).build(c, 8);
  auto va = a.variables()[0].value.to_vector<float>();
  CHECK(va == b.variables()[0].value.to_vector<float>());
  CHECK(va != c.variables()[0].value.to_vector<float>());
  float limit = std::sqrt(6.0f / 7.0f);  // glorot_uniform for [4, 3]
  for (float v : va) CHECK(std::abs(v) <= limit);
}

TEST_CASE("bad model configs are errors with file, line, column and a hint") {
  std::string e = error_of("model:\n  inputs: [{shape: [4]}]\n  layers:\n    - {type: Dens, units: 3}\n");
  CHECK(e.find("model.yaml:4:") != std::string::npos);
  CHECK(e.find("unknown layer type 'Dens'") != std::string::npos);
  CHECK(e.find("did you mean 'Dense'") != std::string::npos);

  e = error_of("model:\n  inputs: [{shape: [4]}]\n  layers:\n    - {type: Dense, unit: 3}\n");
  CHECK(e.find("unknown key 'unit'") != std::string::npos);

  e = error_of("model:\n  inputs: [{shape: [4]}]\n  layers:\n    - {type: Dense, units: three}\n");
  CHECK(e.find("model.layers[0].units") != std::string::npos);

  e = error_of("model:\n  inputs: [{shape: [4]}]\n  layers:\n    - {type: Dense, units: 3, activation: rleu}\n");
  CHECK(e.find("did you mean 'relu'") != std::string::npos);

  e = error_of(R"(model:
  inputs: [{name: x, shape: [4]}]
  layers:
    - {type: Dense, units: 4, name: a, inputs: [b]}
    - {type: Dense, units: 4, name: b, inputs: [a]}
)");
  CHECK(e.find("cycle") != std::string::npos);
  CHECK(e.find("a, b") != std::string::npos);

  e = error_of(R"(model:
  inputs: [{name: x, shape: [4]}]
  layers:
    - {type: Dense, units: 4, name: a, inputs: [y]}
)");
  CHECK(e.find("'y'") != std::string::npos);
  CHECK(e.find("neither a layer nor a model input") != std::string::npos);

  e = error_of("model:\n  inputs: [{name: x, shape: [4]}]\n  layers:\n    - {type: Add, inputs: [x]}\n");
  CHECK(e.find("two or more") != std::string::npos);

  e = error_of("model:\n  inputs: [{shape: [4]}]\n  layers:\n    - {type: Dense, units: 3, name: d}\n    - {type: Dense, units: 3, name: d}\n");
  CHECK(e.find("duplicate layer name 'd'") != std::string::npos);
}

TEST_CASE("Concatenate joins branches along the feature axis") {
  Model m = parse_model(R"(
model:
  inputs: [{name: x, shape: [4]}]
  layers:
    - {type: Dense, units: 3, name: left, inputs: [x]}
    - {type: Dense, units: 2, name: right, inputs: [x]}
    - {type: Concatenate, inputs: [left, right, x]}
)");
  VariableStore store;
  Graph g;
  CHECK(g.shape(m.trace(g, 6, false, store, 0).output) == Shape{6, 9});
  CHECK(error_of("model:\n  inputs: [{name: x, shape: [4]}]\n  layers:\n    - {type: Concatenate, axis: 0, inputs: [x, x]}\n")
            .find("batch axis") != std::string::npos);
}

TEST_CASE("BatchNormalization normalises with batch statistics and moves its moving ones") {
  Model m = parse_model(R"(
model:
  inputs: [{name: x, shape: [2]}]
  layers:
    - {type: BatchNormalization, momentum: 0.5}
)");
  VariableStore store;
  Graph g;
  auto traced = m.trace(g, 4, /*training=*/true, store, 0);
  Executor exec(g, {traced.output});
  exec.bind(traced.inputs[0], Tensor::from_vector<float>({1, 10, 3, 10, 5, 10, 7, 10}, {4, 2}));
  for (auto& [path, id] : traced.variables) exec.bind(id, store.find(path)->value);
  exec.run();
  // Column 0: mean 4, variance 5; column 1 is constant (variance 0).
  float s = 1.0f / std::sqrt(5.0f + 1e-3f);
  tessera::test::check_close(exec.output(traced.output), {-3 * s, 0, -1 * s, 0, 1 * s, 0, 3 * s, 0}, 1e-5, 1e-5);
  tessera::test::check_close(store.find("sequential/batch_normalization/moving_mean")->value, {2.0f, 5.0f});
  tessera::test::check_close(store.find("sequential/batch_normalization/moving_variance")->value, {3.0f, 0.5f});
  CHECK_FALSE(store.find("sequential/batch_normalization/moving_mean")->trainable);
}

TEST_CASE("the summary counts trainable and non-trainable parameters apart, as Keras' does") {
  // Issue 19: inspect printed two different totals for a model with
  // BatchNormalization (its moving statistics are variables, not trained).
  Model m = parse_model(R"(
model:
  inputs: [{name: x, shape: [3]}]
  layers:
    - {type: Dense, units: 4}
    - {type: BatchNormalization}
)");
  VariableStore store;
  const std::string summary = m.summary(store, 0);
  INFO(summary);
  // Dense 3x4 + 4; BatchNormalization gamma and beta (trained), moving mean and variance (not).
  CHECK(summary.find("Total params: 32\nTrainable params: 24\nNon-trainable params: 8\n") != std::string::npos);
  CHECK(store.parameter_count(false) == 32);
  CHECK(store.parameter_count() == 24);
}
