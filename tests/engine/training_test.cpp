// fit / evaluate / predict, losses, schedules and clipping.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "engine/config/config.hpp"
#include "engine/data/synthetic.hpp"
#include "engine/graph/autodiff.hpp"
#include "engine/run/trainer.hpp"
#include "tests/classifier.hpp"
#include "tests/temp_dir.hpp"
#include "tests/test_util.hpp"

using namespace tessera;
using namespace tessera::test;

namespace {

TrainingSpec spec(const std::string& optimizer = "{type: adam, learning_rate: 0.01}") {
  return parse_training(ConfigNode::parse(
      "training: {loss: {type: sparse_categorical_crossentropy, from_logits: true}, optimizer: " + optimizer +
      ", metrics: [accuracy], epochs: 4, batch_size: 16, seed: 3}")["training"]);
}

}  // namespace

TEST_CASE("fit learns a separable synthetic problem, with a partial last batch") {
  Model model = classifier();
  Dataset data = synthetic_classification(200, {8}, 3, 1);  // 200 = 12 batches of 16 + 8
  VariableStore store;
  Trainer trainer(model, spec(), store);
  std::int64_t batches_seen = 0;
  FitCallbacks callbacks;
  callbacks.on_batch = [&](std::int64_t, std::int64_t, std::int64_t batches, const Evaluation&) {
    ++batches_seen;
    CHECK(batches == 13);
  };
  auto logs = trainer.fit(data, &data, callbacks);
  REQUIRE(logs.size() == 4);
  CHECK(batches_seen == 52);
  CHECK(trainer.step() == 52);
  CHECK(logs.back().train.samples == 200);
  CHECK(logs.back().train.loss < logs.front().train.loss);
  CHECK(logs.back().validation.metrics.at("accuracy") > 0.9);
  Evaluation again = trainer.evaluate(data);
  CHECK(again.loss == doctest::Approx(logs.back().validation.loss));
}

TEST_CASE("the same seed gives a bit-identical loss curve") {
  Dataset data = synthetic_classification(100, {8}, 3, 2);
  std::vector<double> curves[2];
  for (auto& curve : curves) {
    Model model = classifier();
    VariableStore store;
    Trainer trainer(model, spec(), store);
    FitCallbacks callbacks;
    callbacks.on_batch = [&](std::int64_t, std::int64_t, std::int64_t, const Evaluation& running) {
      curve.push_back(running.loss);
    };
    trainer.fit(data, nullptr, callbacks);
  }
  CHECK(curves[0].size() == 28);
  CHECK(curves[0] == curves[1]);
}

TEST_CASE("predict is the model's function of its weights over any batch split and drops nothing") {
  // The classifier with a Dropout between its layers: inference keeps every unit.
  Model model = Model::from_config(ConfigNode::parse(R"(
model:
  inputs: [{name: x, shape: [8]}]
  layers:
    - {type: Dense, units: 16, activation: relu}
    - {type: Dropout, rate: 0.5}
    - {type: Dense, units: 3}
)")["model"]);
  Dataset data = synthetic_classification(37, {8}, 3, 4);
  VariableStore store;
  Trainer trainer(model, spec(), store);
  Tensor all = trainer.predict(data.inputs);
  CHECK(all.shape() == Shape{37, 3});
  // relu(x W0 + b0) W1 + b1, in double from the store's weights.
  auto weights = [&](const std::string& path) { return store.find("sequential/" + path)->value.to_vector<float>(); };
  const auto w0 = weights("dense/kernel"), b0 = weights("dense/bias"), w1 = weights("dense_1/kernel"), b1 = weights("dense_1/bias");
  const auto x = data.inputs.to_vector<float>();
  std::vector<float> expected;
  for (std::int64_t r = 0; r < 37; ++r) {
    std::vector<double> hidden(16);
    for (std::size_t j = 0; j < 16; ++j) {
      double sum = b0[j];
      for (std::size_t k = 0; k < 8; ++k) sum += static_cast<double>(x[static_cast<std::size_t>(r) * 8 + k]) * w0[k * 16 + j];
      hidden[j] = std::max(0.0, sum);
    }
    for (std::size_t c = 0; c < 3; ++c) {
      double sum = b1[c];
      for (std::size_t j = 0; j < 16; ++j) sum += hidden[j] * w1[j * 3 + c];
      expected.push_back(static_cast<float>(sum));
    }
  }
  check_close(all, expected, 1e-5, 1e-5);
  TrainingSpec one_batch = spec();
  one_batch.batch_size = 64;
  Trainer whole(model, one_batch, store);
  check_close(all, whole.predict(data.inputs).to_vector<float>(), 1e-5, 1e-6);
}

TEST_CASE("sparse categorical cross-entropy equals its definition") {
  Graph g;
  ValueId logits = g.input("logits", {2, 3});
  ValueId labels = g.input("labels", {2}, DType::i32);
  ValueId loss = build_loss(g, {.type = "sparse_categorical_crossentropy", .from_logits = true}, logits, labels);
  Executor exec(g, {loss});
  std::vector<float> z = {1.0f, 2.0f, 0.5f, -1.0f, 0.0f, 3.0f};
  exec.bind(logits, Tensor::from_vector(z, {2, 3}));
  exec.bind(labels, Tensor::from_vector<std::int32_t>({1, 2}, {2}));
  exec.run();
  double expected = 0;
  for (int r = 0; r < 2; ++r) {
    double sum = 0;
    for (int c = 0; c < 3; ++c) sum += std::exp(static_cast<double>(z[r * 3 + c]));
    expected += -(static_cast<double>(z[r * 3 + (r == 0 ? 1 : 2)]) - std::log(sum));
  }
  check_close(exec.output(loss), {static_cast<float>(expected / 2)}, 3e-5, 1e-6);  // f32 log-softmax
}

TEST_CASE("cross-entropies of probabilities follow Keras: scaled to sum 1 and clipped on both sides") {
  // Scores outside [0, 1] that do not sum to 1: Keras' categorical loss divides
  // them by the row sum, and both losses clip into [1e-7, 1 - 1e-7].
  const std::vector<float> scores = {0.0f, 2.0f, 2.0f, 1.0f, 0.0f, 0.0f};
  auto loss_of = [&](const char* type, const std::vector<float>& target) {
    Graph g;
    ValueId output = g.input("p", {2, 3}), t = g.input("t", {2, 3});
    ValueId loss = build_loss(g, {.type = type, .from_logits = false}, output, t);
    Executor exec(g, {loss});
    exec.bind(output, Tensor::from_vector(scores, {2, 3}));
    exec.bind(t, Tensor::from_vector(target, {2, 3}));
    exec.run();
    return static_cast<double>(exec.output(loss).to_vector<float>()[0]);
  };
  const double low = 1e-7, high = static_cast<double>(1.0f - 1e-7f);  // the clip bounds, as float
  // Row 0 is [0, 0.5, 0.5] once scaled, its label 1; row 1 is [1, 0, 0], its label 1 (a 0: clipped).
  CHECK(loss_of("categorical_crossentropy", {0, 1, 0, 0, 1, 0}) ==
        doctest::Approx((-std::log(0.5) - std::log(low)) / 2).epsilon(1e-5));
  const std::vector<float> bits = {1, 1, 0, 1, 0, 1};
  double expected = 0;
  for (std::size_t i = 0; i < bits.size(); ++i) {
    const double p = std::clamp(static_cast<double>(scores[i]), low, high), y = bits[i];
    expected -= y * std::log(p) + (1 - y) * std::log(1 - p);
  }
  CHECK(loss_of("binary_crossentropy", bits) == doctest::Approx(expected / 6).epsilon(1e-4));
}

TEST_CASE("a label out of range is an error naming it and the class count") {
  Model model = classifier();
  Dataset data = synthetic_classification(16, {8}, 3, 5);
  data.targets.data<std::int32_t>()[5] = 7;
  VariableStore store;
  Trainer trainer(model, spec(), store);
  try {
    trainer.fit(data, nullptr);
    FAIL("expected a ShapeError");
  } catch (const ShapeError& e) {
    std::string m = e.what();
    CHECK(m.find("id 7") != std::string::npos);
    CHECK(m.find("[0, 3)") != std::string::npos);
  }
}

TEST_CASE("a diverging loss stops training with the step named") {
  Model model = classifier();
  Dataset data = synthetic_classification(64, {8}, 3, 6);
  for (std::int64_t i = 0; i < data.inputs.numel(); ++i) data.inputs.data<float>()[i] *= 1e30f;
  VariableStore store;
  Trainer trainer(model, spec("{type: sgd, learning_rate: 10.0}"), store);
  try {
    trainer.fit(data, nullptr);
    FAIL("expected training to stop");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("training stopped") != std::string::npos);
  }
}

TEST_CASE("cosine schedule with linear warm-up") {
  OptimizerSpec s = parse_optimizer(ConfigNode::parse(
      "{type: adam, learning_rate: 1.0, schedule: {type: cosine, warmup_steps: 4, min_ratio: 0.1}}"));
  CHECK(learning_rate_at(s, 0, 104) == doctest::Approx(0.25));
  CHECK(learning_rate_at(s, 3, 104) == doctest::Approx(1.0));
  CHECK(learning_rate_at(s, 4, 104) == doctest::Approx(1.0));
  CHECK(learning_rate_at(s, 54, 104) == doctest::Approx(0.55));  // halfway: 0.1 + 0.9 * 0.5
  CHECK(learning_rate_at(s, 104, 104) == doctest::Approx(0.1));
}

TEST_CASE("linear, exponential and piecewise schedules follow Keras, each after its warm-up") {
  auto schedule = [](const std::string& text) { return parse_optimizer(ConfigNode::parse(text)); };
  OptimizerSpec linear = schedule("{type: sgd, learning_rate: 1.0, schedule: {type: linear, decay_steps: 100}}");
  CHECK(learning_rate_at(linear, 0, 1000) == doctest::Approx(1.0));
  CHECK(learning_rate_at(linear, 50, 1000) == doctest::Approx(0.5));
  CHECK(learning_rate_at(linear, 100, 1000) == doctest::Approx(0.0));
  CHECK(learning_rate_at(linear, 500, 1000) == doctest::Approx(0.0));  // held at the end
  OptimizerSpec warm = schedule(
      "{type: sgd, learning_rate: 1.0, schedule: {type: linear, warmup_steps: 10, min_ratio: 0.2}}");  // decays over the run
  CHECK(learning_rate_at(warm, 0, 110) == doctest::Approx(0.1));
  CHECK(learning_rate_at(warm, 9, 110) == doctest::Approx(1.0));
  CHECK(learning_rate_at(warm, 60, 110) == doctest::Approx(0.6));  // halfway: 0.2 + 0.8 * 0.5
  OptimizerSpec exponential =
      schedule("{type: adam, learning_rate: 0.1, schedule: {type: exponential, decay_steps: 10, decay_rate: 0.5}}");
  CHECK(learning_rate_at(exponential, 10, 0) == doctest::Approx(0.05));
  CHECK(learning_rate_at(exponential, 5, 0) == doctest::Approx(0.1 * std::sqrt(0.5)));
  OptimizerSpec stairs = schedule(
      "{type: adam, learning_rate: 0.1, schedule: {type: exponential, decay_steps: 10, decay_rate: 0.5, staircase: true, "
      "warmup_steps: 5}}");
  CHECK(learning_rate_at(stairs, 4, 0) == doctest::Approx(0.1));
  CHECK(learning_rate_at(stairs, 14, 0) == doctest::Approx(0.1));  // 9 steps after warm-up: still the first stair
  CHECK(learning_rate_at(stairs, 15, 0) == doctest::Approx(0.05));
  OptimizerSpec piecewise =
      schedule("{type: sgd, schedule: {type: piecewise, boundaries: [10, 20], values: [1.0, 0.5, 0.1]}}");
  CHECK(piecewise.learning_rate == doctest::Approx(1.0));
  for (auto step_rate : {std::pair{0, 1.0}, {10, 1.0}, {11, 0.5}, {20, 0.5}, {21, 0.1}, {1000, 0.1}})
    CHECK(learning_rate_at(piecewise, step_rate.first, 0) == doctest::Approx(step_rate.second));
}

TEST_CASE("a schedule's missing or contradictory settings are config errors at the key") {
  const std::pair<const char*, const char*> cases[] = {
      {"{type: sgd, learning_rate: 0.1, schedule: {type: piecewise, boundaries: [10], values: [1.0, 0.5]}}",
       "leave out the optimizer's learning_rate"},
      {"{type: sgd, schedule: {type: piecewise, boundaries: [10], values: [1.0]}}",
       "values must be one more than boundaries (2), got 1"},
      {"{type: sgd, schedule: {type: piecewise, boundaries: [10, 5], values: [1, 2, 3]}}", "increasing order"},
      {"{type: sgd, schedule: {type: exponential, decay_steps: 10}}", "needs decay_steps and decay_rate"},
      {"{type: sgd, schedule: {type: exponential, decay_steps: 10, decay_rate: 0.5, min_ratio: 0.1}}", "min_ratio"},
      {"{type: sgd, schedule: {type: step}}", "piecewise"},
  };
  for (const auto& c : cases) {
    const std::string message = error_of<ConfigError>([&] { parse_optimizer(ConfigNode::parse(c.first)); });
    CHECK_MESSAGE(message.find(c.second) != std::string::npos, std::string(c.first), " -> ", message);
  }
}

TEST_CASE("global-norm clipping scales every gradient by one factor") {
  Graph g;
  ValueId a = g.variable("a", {2}), b = g.variable("b", {1});
  ValueId loss = g.add(g.reduce(ReduceOp::sum, g.scale(a, 3.0), {0}), g.reduce(ReduceOp::sum, g.scale(b, 4.0), {0}));
  auto grads = append_gradients(g, loss, {a, b});  // (3, 3) and (4): norm sqrt(34)
  OptimizerSpec sgd = parse_optimizer(ConfigNode::parse("{type: sgd, learning_rate: 1.0, global_clipnorm: 1.0}"));
  VariableStore store;
  std::vector<std::pair<std::string, ValueId>> state;
  append_updates(g, sgd, {{"a", a}, {"b", b}}, grads, store, state);
  Executor exec(g, {loss});
  Tensor av = zeros({2}), bv = zeros({1});
  exec.bind(a, av);
  exec.bind(b, bv);
  for (auto& [path, id] : state) exec.bind(id, store.find(path)->value);
  exec.run();
  double norm = std::sqrt(34.0);
  check_close(av, {static_cast<float>(-3 / norm), static_cast<float>(-3 / norm)}, 1e-5, 1e-6);
  check_close(bv, {static_cast<float>(-4 / norm)}, 1e-5, 1e-6);
}

TEST_CASE("bad training configs are errors with a hint") {
  auto error_of = [](const std::string& yaml) {
    return test::error_of<ConfigError>([&] { parse_training(ConfigNode::parse(yaml, "run.yaml")["training"]); });
  };
  CHECK(error_of("training: {loss: mse, optimizer: adamm}").find("did you mean 'adam'") != std::string::npos);
  CHECK(error_of("training: {loss: msee}").find("unknown loss") != std::string::npos);
  CHECK(error_of("training: {loss: mse, metrics: [acuracy]}").find("did you mean 'accuracy'") != std::string::npos);
  CHECK(error_of("training: {loss: mse, optimizer: {type: sgd, beta_1: 0.9}}").find("unknown key 'beta_1'") != std::string::npos);
  CHECK(error_of("training: {loss: mse, epochs: 0}").find("run.yaml:1:") != std::string::npos);
  // Values the update rules cannot use are errors at the value, not a NaN loss later.
  CHECK(error_of("training: {loss: mse, optimizer: {type: adam, beta_1: 1.0}}").find("run.yaml:1:55: training.optimizer.beta_1: beta_1 must lie in [0, 1)") != std::string::npos);
  CHECK(error_of("training: {loss: mse, optimizer: {type: adam, learning_rate: .nan}}").find("learning_rate must be a positive number") != std::string::npos);
  CHECK(error_of("training: {loss: mse, optimizer: {type: adam, epsilon: -1}}").find("epsilon must be a positive number") != std::string::npos);
  CHECK(error_of("training: {loss: mse, optimizer: {type: sgd, momentum: 1}}").find("momentum must lie in [0, 1)") != std::string::npos);
  CHECK(error_of("training: {loss: mse, optimizer: {type: sgd, global_clipnorm: -1}}").find("global_clipnorm must be >= 0") != std::string::npos);
  CHECK(error_of("training: {loss: mse, optimizer: {type: adam, schedule: {type: cosine, min_ratio: 2}}}").find("min_ratio must lie in [0, 1]") != std::string::npos);
}

TEST_CASE("fit refuses validation data and a checkpoint folder it cannot use before training") {
  Model model = classifier();
  Dataset data = synthetic_classification(64, {8}, 3, 1);
  VariableStore store;
  Trainer trainer(model, spec(), store);
  Dataset wide = synthetic_classification(10, {9}, 3, 2);
  CHECK_THROWS_WITH_AS(trainer.fit(data, &wide), doctest::Contains("takes [8]"), ShapeError);
  Dataset floats{synthetic_classification(10, {8}, 3, 2).inputs, Tensor::from_vector(std::vector<float>(30, 0.0f), {10, 3}), "float targets"};
  CHECK_THROWS_WITH_AS(trainer.fit(data, &floats), doctest::Contains("'float targets' has targets f32[10, 3]"), ShapeError);
  CHECK(trainer.step() == 0);

  TempDir dir;
  std::ofstream(dir / "notes.txt") << "not a checkpoint";
  TrainingSpec saving = spec();
  saving.checkpoint.dir = dir.path();
  VariableStore other;
  Trainer refusing(model, saving, other);
  CHECK_THROWS_WITH_AS(refusing.fit(data, &data), doctest::Contains("is not a checkpoint"), CheckpointError);
  CHECK(refusing.step() == 0);
}

TEST_CASE("top-k accuracy counts a label among the k highest scores") {
  Model model = classifier();
  Dataset data = synthetic_classification(64, {8}, 3, 9);
  TrainingSpec s = spec();
  s.metrics = {"accuracy", "top_2_accuracy", "top_3_accuracy"};
  VariableStore store;
  Trainer trainer(model, s, store);
  Evaluation e = trainer.evaluate(data);
  // Counted by hand from the scores: how many labels are among the k highest.
  const auto scores = trainer.predict(data.inputs).to_vector<float>();
  const auto labels = data.targets.to_vector<std::int32_t>();
  double top1 = 0, top2 = 0;
  for (std::size_t r = 0; r < labels.size(); ++r) {
    const float* row = scores.data() + r * 3;
    int higher = 0;
    for (int c = 0; c < 3; ++c) higher += row[c] > row[labels[r]];
    top1 += higher < 1;
    top2 += higher < 2;
  }
  CHECK(e.metrics.at("accuracy") == doctest::Approx(top1 / 64));
  CHECK(e.metrics.at("top_2_accuracy") == doctest::Approx(top2 / 64));
  CHECK(top2 > top1);  // the case tells the two apart
  CHECK(e.metrics.at("top_3_accuracy") == doctest::Approx(1.0));  // 3 classes: always among the top 3
  CHECK_THROWS_AS(parse_training(ConfigNode::parse("training: {loss: mse, metrics: [top_x_accuracy]}")["training"]), ConfigError);
}

TEST_CASE("accuracy of binary_crossentropy is Keras' binary accuracy") {
  // Two sigmoid (or logit) units per sample, judged element by element.
  for (const bool logits : {false, true}) {
    CAPTURE(logits);
    Model model = Model::from_config(ConfigNode::parse(std::string(R"(
model:
  inputs: [{name: x, shape: [4]}]
  layers:
    - {type: Dense, units: 2)") + (logits ? "" : ", activation: sigmoid") + "}\n")["model"]);
    TrainingSpec s = parse_training(ConfigNode::parse(std::string("training: {loss: {type: binary_crossentropy, from_logits: ") +
                                                      (logits ? "true" : "false") + "}, metrics: [accuracy]}")["training"]);
    VariableStore store;
    Trainer trainer(model, s, store);
    Tensor x = Tensor::from_vector(std::vector<float>{1, -2, 0.5f, 3, -1, 2, 1, 0, 0.2f, 0.1f, -3, 1}, {3, 4});
    const std::vector<float> scores = trainer.predict(x).to_vector<float>();
    // Targets that agree with the prediction on elements 0, 3 and 4 of the six.
    std::vector<float> targets(6);
    for (std::size_t i = 0; i < 6; ++i) {
      const bool positive = scores[i] > (logits ? 0.0f : 0.5f);
      targets[i] = (i == 0 || i == 3 || i == 4) == positive ? 1.0f : 0.0f;
    }
    Evaluation e = trainer.evaluate({x, Tensor::from_vector(targets, {3, 2}), "three samples"});
    CHECK(e.metrics.at("accuracy") == doctest::Approx(0.5));
  }
  CHECK_THROWS_WITH_AS(parse_training(ConfigNode::parse("training: {loss: binary_crossentropy, metrics: [top_2_accuracy]}")["training"]),
                       doctest::Contains("use 'accuracy'"), ConfigError);
}

TEST_CASE("integer inputs of any width feed a model where their values fit, and shape errors name one sample's shape") {
  // Issue 19: uint8 images (read as i32) were refused by a float input,
  // numpy's int64 tokens by an int32 one, and a shape error printed the
  // whole array's shape as "samples of shape".
  Model model = classifier();
  VariableStore store;
  Trainer trainer(model, spec(), store);
  Tensor bytes = Tensor::empty({2, 8}, DType::i32);
  Tensor floats = Tensor::empty({2, 8}, DType::f32);
  for (std::int64_t i = 0; i < 16; ++i) {
    bytes.data<std::int32_t>()[i] = static_cast<std::int32_t>(i * 16);
    floats.data<float>()[i] = static_cast<float>(i * 16);
  }
  CHECK(trainer.predict(bytes).to_vector<float>() == trainer.predict(floats).to_vector<float>());
  CHECK_THROWS_WITH_AS(trainer.predict(Tensor::empty({2, 9}, DType::f32)),
                       doctest::Contains("has 2 samples of shape [9] (9 values each) but model input 'x' takes [8] (8 values)"),
                       ShapeError);

  Model tokens = Model::from_config(ConfigNode::parse(R"(
model:
  inputs: [{name: tokens, shape: [4], dtype: i32}]
  layers:
    - {type: Embedding, input_dim: 10, output_dim: 2}
)")["model"]);
  VariableStore token_store;
  Trainer token_trainer(tokens, spec(), token_store);
  Tensor wide = Tensor::from_vector<std::int64_t>({1, 2, 3, 9}, {1, 4});
  Tensor narrow = Tensor::from_vector<std::int32_t>({1, 2, 3, 9}, {1, 4});
  CHECK(token_trainer.predict(wide).to_vector<float>() == token_trainer.predict(narrow).to_vector<float>());
  Tensor too_wide = Tensor::from_vector<std::int64_t>({1, 2, std::int64_t{1} << 40, 9}, {1, 4});
  CHECK_THROWS_WITH_AS(token_trainer.predict(too_wide), doctest::Contains("its element 2 (1099511627776) does not fit in it"),
                       DTypeError);
  CHECK_THROWS_AS(token_trainer.predict(Tensor::empty({1, 4}, DType::f32)), DTypeError);  // floats never become tokens
}

TEST_CASE("evaluate and predict report each batch") {
  Model model = classifier();
  Dataset data = synthetic_classification(40, {8}, 3, 5);  // 3 batches of 16: 16, 32, 40
  VariableStore store;
  Trainer trainer(model, spec(), store);
  std::vector<std::int64_t> seen;
  const Evaluation result = trainer.evaluate(data, [&](std::int64_t batch, std::int64_t batches, const Evaluation& running) {
    CHECK(batches == 3);
    CHECK(batch == static_cast<std::int64_t>(seen.size()) + 1);
    seen.push_back(running.samples);
  });
  CHECK(seen == std::vector<std::int64_t>{16, 32, 40});
  CHECK(result.loss == doctest::Approx(trainer.evaluate(data).loss));
  seen.clear();
  trainer.predict(data.inputs, [&](std::int64_t, std::int64_t batches, const Evaluation& running) {
    CHECK(batches == 3);
    seen.push_back(running.samples);
  });
  CHECK(seen == std::vector<std::int64_t>{16, 32, 40});
}

TEST_CASE("targets are converted to what the loss takes, or refused before the first step") {
  // Issue 19: binary_crossentropy with Dense(1) on a CSV's class ids failed
  // after training started with a bare shape error.
  Model one = Model::from_config(ConfigNode::parse(R"(
model:
  inputs: [{name: x, shape: [8]}]
  layers:
    - {type: Dense, units: 1}
)")["model"]);
  auto training = [](const std::string& loss) {
    return parse_training(ConfigNode::parse("training: {loss: " + loss +
                                            ", optimizer: {type: sgd, learning_rate: 0.01}, epochs: 1, batch_size: 16}")["training"]);
  };
  Dataset data = synthetic_classification(32, {8}, 2, 6);  // i32 [32] class ids 0 and 1
  {
    VariableStore store;
    Trainer binary(one, training("{type: binary_crossentropy, from_logits: true}"), store);
    CHECK(binary.fit(data, &data).size() == 1);  // ids as f32 [32, 1]
  }
  Dataset regression = data;
  regression.targets = Tensor::empty({32}, DType::f32);
  for (std::int64_t i = 0; i < 32; ++i) regression.targets.data<float>()[i] = 0.25f * static_cast<float>(i);
  {
    VariableStore store;
    Trainer mse(one, training("mse"), store);
    CHECK(mse.fit(regression, nullptr).size() == 1);
  }
  VariableStore store;
  Model three = classifier();  // the trainer keeps a reference
  Trainer sparse(three, spec(), store);
  CHECK_THROWS_WITH_AS(sparse.fit(regression, nullptr),
                       doctest::Contains("element 1 is 0.25"), ShapeError);
  CHECK(sparse.step() == 0);  // refused before any step
}

TEST_CASE("steps_per_epoch caps the batches of each epoch, for quick runs") {
  // Issue 19: a data limit for quick runs (Keras' steps_per_epoch).
  Model model = classifier();
  Dataset data = synthetic_classification(200, {8}, 3, 1);  // 13 batches of 16
  TrainingSpec capped = spec();
  capped.steps_per_epoch = 3;
  VariableStore store;
  Trainer trainer(model, capped, store);
  std::vector<std::int64_t> seen;
  FitCallbacks callbacks;
  callbacks.on_batch = [&](std::int64_t, std::int64_t batch, std::int64_t batches, const Evaluation&) {
    CHECK(batches == 3);
    seen.push_back(batch);
  };
  const auto logs = trainer.fit(data, nullptr, callbacks);
  CHECK(trainer.step() == 4 * 3);
  CHECK(seen == std::vector<std::int64_t>{1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3});
  CHECK(logs.back().train.samples == 3 * 16);
  CHECK_THROWS_WITH_AS(parse_training(ConfigNode::parse("training: {loss: mse, steps_per_epoch: 0}")["training"]),
                       doctest::Contains("steps_per_epoch must be >= 1"), ConfigError);
}

TEST_CASE("evaluate weighs each sample's loss by its weight, over all samples, across batches") {
  Model model = classifier();
  Dataset data = synthetic_classification(20, {8}, 3, 4);  // batches of 16 and 4
  VariableStore store;
  Trainer trainer(model, spec(), store);
  std::vector<float> weights(20);
  double expected = 0;
  for (std::int64_t i = 0; i < 20; ++i) {
    weights[static_cast<std::size_t>(i)] = static_cast<float>(i % 4) * 0.5f;
    Dataset one{data.inputs.rows(i, 1), data.targets.rows(i, 1), "sample"};
    expected += weights[static_cast<std::size_t>(i)] * trainer.evaluate(one).loss;
  }
  data.weights = Tensor::from_vector(weights, {20});
  const Evaluation weighted = trainer.evaluate(data);
  CHECK(weighted.loss == doctest::Approx(expected / 20).epsilon(1e-5));
  // Metrics stay unweighted, as Keras' `metrics` (not `weighted_metrics`).
  data.weights = Tensor{};
  CHECK(weighted.metrics.at("accuracy") == doctest::Approx(trainer.evaluate(data).metrics.at("accuracy")));
  // A weight per sample, finite and >= 0.
  data.weights = Tensor::from_vector(std::vector<float>(19, 1.0f), {19});
  CHECK(error_of<ShapeError>([&] { trainer.evaluate(data); }).find("give one weight per sample, [20]") !=
        std::string::npos);
  weights[3] = -1.0f;
  data.weights = Tensor::from_vector(weights, {20});
  CHECK(error_of<DataError>([&] { trainer.evaluate(data); }).find("sample weight 3 is -1") != std::string::npos);
}

TEST_CASE("class_weight trains as the same weights given per sample, and a weight of 0 removes a sample") {
  Dataset data = synthetic_classification(48, {8}, 3, 6);
  auto trained = [](const TrainingSpec& training, const Dataset& d) {
    Model model = classifier();
    VariableStore store;
    Trainer trainer(model, training, store);
    trainer.fit(d, nullptr);
    std::vector<float> values;
    for (const Variable& v : store.variables()) {
      const auto part = v.value.to_vector<float>();
      values.insert(values.end(), part.begin(), part.end());
    }
    return values;
  };
  TrainingSpec by_class = spec();
  by_class.class_weight.weights = {{0, 2.0}, {2, 0.0}};  // class 1 keeps 1
  std::vector<float> per_sample(48);
  for (std::int64_t i = 0; i < 48; ++i) {
    const std::int32_t label = data.targets.data<std::int32_t>()[i];
    per_sample[static_cast<std::size_t>(i)] = label == 0 ? 2.0f : label == 2 ? 0.0f : 1.0f;
  }
  Dataset weighted = data;
  weighted.weights = Tensor::from_vector(per_sample, {48});
  const std::vector<float> expected = trained(spec(), weighted);
  CHECK(trained(by_class, data) == expected);
  // Class 2's samples weigh 0: whatever their inputs, training ends the same.
  Dataset moved = weighted;
  moved.inputs = Tensor::from_vector(data.inputs.to_vector<float>(), data.inputs.shape());
  for (std::int64_t i = 0; i < 48; ++i)
    if (data.targets.data<std::int32_t>()[i] == 2)
      for (std::int64_t f = 0; f < 8; ++f) moved.inputs.data<float>()[i * 8 + f] += 3.0f;
  CHECK(trained(spec(), moved) == expected);
  // A class the model does not have is named.
  TrainingSpec unknown = spec();
  unknown.class_weight = {.weights = {{5, 1.0}}, .where = "run.yaml:9:5: training.class_weight"};
  CHECK(error_of<ConfigError>([&] { trained(unknown, data); }) ==
        "run.yaml:9:5: training.class_weight: class_weight names class 5, but the model's output has 3 classes (0 to 2)");
}

TEST_CASE("validation_split holds out the last samples, before shuffling, and validates on them") {
  Model model = classifier();
  Dataset data = synthetic_classification(100, {8}, 3, 8);
  VariableStore store;
  TrainingSpec split = spec();
  split.validation_split = 0.25;
  Trainer trainer(model, split, store);
  const auto logs = trainer.fit(data, nullptr);
  CHECK(logs.back().train.samples == 75);
  CHECK(logs.back().validation.samples == 25);
  Dataset last{data.inputs.rows(75, 25), data.targets.rows(75, 25), "last 25"};
  CHECK(trainer.evaluate(last).loss == doctest::Approx(logs.back().validation.loss));
  CHECK(error_of([&] { trainer.fit(data, &data); }).find("use one or the other") != std::string::npos);
  // As a config key: in (0, 1), and not beside data.validation.
  CHECK(error_of<ConfigError>([] {
          parse_training(ConfigNode::parse("training: {loss: mse, validation_split: 1.5}")["training"]);
        }).find("<string>:1:") != std::string::npos);
}

TEST_CASE("categorical targets train with accuracy, auc, precision and recall logged per epoch") {
  Model model = classifier();
  Dataset data = synthetic_classification(96, {8}, 3, 9);
  std::vector<float> one_hot(96 * 3, 0.0f);
  for (std::int64_t i = 0; i < 96; ++i) one_hot[static_cast<std::size_t>(i * 3 + data.targets.data<std::int32_t>()[i])] = 1;
  Dataset dense{data.inputs, Tensor::from_vector(one_hot, {96, 3}), "one-hot"};
  VariableStore store;
  Trainer trainer(model, parse_training(ConfigNode::parse(
                             "training: {loss: {type: categorical_crossentropy, from_logits: true, label_smoothing: 0.1},"
                             " metrics: [accuracy, auc, precision, recall], epochs: 6, batch_size: 16, seed: 3,"
                             " optimizer: {type: adam, learning_rate: 0.02}}")["training"]),
                  store);
  const auto logs = trainer.fit(dense, &dense);
  for (const char* name : {"accuracy", "auc", "precision", "recall"}) {
    CAPTURE(std::string(name));
    const double first = logs.front().validation.metrics.at(name), last = logs.back().validation.metrics.at(name);
    CHECK(last >= first);
    CHECK(last <= 1);
  }
  CHECK(logs.back().validation.metrics.at("auc") > 0.9);
}

TEST_CASE("kernel and bias regularizers add l1 sum|w| + l2 sum w^2 to the loss, and their gradient to each step") {
  const std::string layers = R"(
model:
  inputs: [{name: x, shape: [8]}]
  layers:
    - {type: Dense, units: 16, activation: relu, kernel_regularizer: {l1: 0.01, l2: 0.02}, bias_regularizer: l2}
    - {type: Dense, units: 3, kernel_regularizer: l1}
)";
  Model regularized = Model::from_config(ConfigNode::parse(layers)["model"]);
  Model plain = classifier();  // the same layers, seeded alike, without penalties
  Dataset data = synthetic_classification(16, {8}, 3, 12);
  TrainingSpec sgd = spec("{type: sgd, learning_rate: 0.1}");
  sgd.epochs = 1;
  VariableStore with_store, without_store;
  Trainer with(regularized, sgd, with_store), without(plain, sgd, without_store);
  const double with_loss = with.evaluate(data).loss, without_loss = without.evaluate(data).loss;  // makes the variables
  auto value = [](VariableStore& store, const std::string& path) -> const Tensor& {
    for (const Variable& v : store.variables())
      if (v.path.size() >= path.size() && v.path.compare(v.path.size() - path.size(), path.size(), path) == 0) return v.value;
    FAIL("no variable " << path);
    throw Error("unreachable");
  };
  // Each penalty from the store's values, as Keras' L1L2 (l1 and l2 default to 0.01).
  auto sum = [](const Tensor& t, bool squares) {
    double s = 0;
    for (float v : t.to_vector<float>()) s += squares ? static_cast<double>(v) * v : std::abs(static_cast<double>(v));
    return s;
  };
  const Tensor k0 = value(with_store, "/dense/kernel"), b0 = value(with_store, "/dense/bias"),
               k1 = value(with_store, "/dense_1/kernel");
  for (const char* path : {"/dense/kernel", "/dense/bias", "/dense_1/kernel", "/dense_1/bias"})
    CHECK(value(with_store, path).to_vector<float>() == value(without_store, path).to_vector<float>());
  const double penalty = 0.01 * sum(k0, false) + 0.02 * sum(k0, true) + 0.01 * sum(b0, true) + 0.01 * sum(k1, false);
  CHECK(with_loss == doctest::Approx(without_loss + penalty).epsilon(1e-5));
  // One SGD step: the penalty's gradient, l1 sign(w) + 2 l2 w, is added to the data's.
  const std::vector<float> before = k0.to_vector<float>();
  with.train_step(data.inputs, data.targets);
  without.train_step(data.inputs, data.targets);
  const std::vector<float> a = value(with_store, "/dense/kernel").to_vector<float>(),
                           b = value(without_store, "/dense/kernel").to_vector<float>();
  std::vector<float> expected(b.size());
  for (std::size_t i = 0; i < b.size(); ++i)
    expected[i] = b[i] - 0.1f * (0.01f * (before[i] > 0 ? 1.0f : -1.0f) + 2 * 0.02f * before[i]);
  check_close(a, expected, 1e-5, 1e-6);
  // Errors at the key.
  auto error = [](const std::string& layer) {
    return error_of<ConfigError>([&] {
      Model::from_config(ConfigNode::parse("model: {inputs: [{name: x, shape: [8]}], layers: [" + layer + "]}")["model"]);
    });
  };
  CHECK(error("{type: Dense, units: 2, kernel_regularizer: l3}").find("did you mean") != std::string::npos);
  CHECK(error("{type: Dense, units: 2, kernel_regularizer: {l2: -1}}").find("finite number >= 0") != std::string::npos);
  CHECK(error("{type: Dense, units: 2, use_bias: false, bias_regularizer: l2}").find("has no bias") != std::string::npos);
  CHECK(error("{type: Dense, units: 2, kernel_regularizer: {l3: 1}}").find("<string>:1:") != std::string::npos);
}
