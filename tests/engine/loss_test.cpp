// Losses (engine/training/loss.hpp) against their definitions, written out
// here in double: MAE, Huber, label smoothing, per-sample weights, and the
// gradients of each against finite differences.
#include <doctest/doctest.h>

#include <cmath>
#include <span>

#include "engine/config/config.hpp"
#include "engine/graph/executor.hpp"
#include "engine/training/loss.hpp"
#include "tests/grad_check.hpp"
#include "tests/test_util.hpp"

using namespace tessera;
using namespace tessera::test;

namespace {

// The loss of `output` against `target` (and `weight`, when defined), run once.
double loss_value(const LossSpec& spec, const Tensor& output, const Tensor& target, const Tensor& weight = {}) {
  Graph g;
  ValueId out = g.input("output", output.shape());
  ValueId t = g.input("target", target.shape(), target.dtype());
  ValueId w = weight.defined() ? g.input("weight", weight.shape()) : -1;
  ValueId loss = build_loss(g, spec, out, t, w);
  Executor exec(g, {loss});
  exec.bind(out, output);
  exec.bind(t, target);
  if (w >= 0) exec.bind(w, weight);
  exec.run();
  return exec.output(loss).to_vector<float>()[0];
}

std::vector<double> as_double(const Tensor& t) {
  std::vector<double> out;
  for (float v : t.to_vector<float>()) out.push_back(v);
  return out;
}

// -sum(y log softmax(z)) of one row.
double crossentropy(const double* z, const std::vector<double>& y) {
  double max = z[0], sum = 0, loss = 0;
  for (std::size_t c = 0; c < y.size(); ++c) max = std::max(max, z[c]);
  for (std::size_t c = 0; c < y.size(); ++c) sum += std::exp(z[c] - max);
  for (std::size_t c = 0; c < y.size(); ++c) loss -= y[c] * (z[c] - max - std::log(sum));
  return loss;
}

LossSpec loss_spec(const std::string& yaml) { return parse_loss(ConfigNode::parse("loss: " + yaml)["loss"]); }

}  // namespace

TEST_CASE("mae and huber equal their definitions: huber is quadratic within delta and linear beyond") {
  Tensor output = Tensor::from_vector(std::vector<float>{0.5f, -2.0f, 3.0f, 0.1f, 1.0f, -0.7f}, {2, 3});
  Tensor target = Tensor::from_vector(std::vector<float>{0.0f, 1.0f, 3.5f, -1.4f, 1.0f, 2.0f}, {2, 3});
  const std::vector<double> o = as_double(output), t = as_double(target);
  for (double delta : {1.0, 0.3, 2.5}) {
    double mae = 0, huber = 0;
    for (std::size_t i = 0; i < o.size(); ++i) {
      const double d = std::abs(o[i] - t[i]);
      mae += d;
      huber += d <= delta ? 0.5 * d * d : delta * d - 0.5 * delta * delta;
    }
    CHECK(loss_value(loss_spec("{type: huber, delta: " + std::to_string(delta) + "}"), output, target) ==
          doctest::Approx(huber / 6).epsilon(1e-5));
    CHECK(loss_value(loss_spec("mean_absolute_error"), output, target) == doctest::Approx(mae / 6).epsilon(1e-5));
  }
}

TEST_CASE("label smoothing pulls every cross-entropy's targets toward uniform, as Keras") {
  const double s = 0.2;
  Tensor logits = random_tensor({4, 3}, 7, -2.0f, 2.0f);
  Tensor labels = Tensor::from_vector<std::int32_t>({0, 2, 1, 2}, {4});
  const std::vector<double> z = as_double(logits);
  double expected = 0;
  std::vector<float> smoothed_rows;
  for (int r = 0; r < 4; ++r) {
    std::vector<double> y(3, s / 3);
    y[static_cast<std::size_t>(labels.data<std::int32_t>()[r])] += 1 - s;
    expected += crossentropy(z.data() + r * 3, y);
    smoothed_rows.insert(smoothed_rows.end(), y.begin(), y.end());
  }
  CHECK(loss_value(loss_spec("{type: sparse_categorical_crossentropy, from_logits: true, label_smoothing: 0.2}"),
                   logits, labels) == doctest::Approx(expected / 4).epsilon(1e-5));
  // The categorical loss smooths its one-hot targets the same way.
  Tensor one_hot = Tensor::from_vector(std::vector<float>{1, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 1}, {4, 3});
  CHECK(loss_value(loss_spec("{type: categorical_crossentropy, from_logits: true, label_smoothing: 0.2}"), logits,
                   one_hot) == doctest::Approx(expected / 4).epsilon(1e-5));
  // Binary: y (1 - s) + s / 2, against sigmoid(z).
  Tensor bits = Tensor::from_vector(std::vector<float>{1, 0, 0, 1, 1, 1, 0, 0, 1, 0, 1, 0}, {4, 3});
  double binary = 0;
  for (std::size_t i = 0; i < z.size(); ++i) {
    const double y = bits.data<float>()[i] * (1 - s) + s / 2, p = 1 / (1 + std::exp(-z[i]));
    binary -= y * std::log(p) + (1 - y) * std::log(1 - p);
  }
  CHECK(loss_value(loss_spec("{type: binary_crossentropy, from_logits: true, label_smoothing: 0.2}"), logits, bits) ==
        doctest::Approx(binary / 12).epsilon(1e-5));
}

TEST_CASE("a weighted loss is each sample's mean loss times its weight, summed over N (Keras' sum_over_batch_size)") {
  // A sequence model's output: [N, T, classes]; a sample's loss is its mean over T.
  Tensor logits = random_tensor({3, 2, 4}, 11, -2.0f, 2.0f);
  Tensor labels = random_labels({3, 2}, 4, 5);
  Tensor weights = Tensor::from_vector(std::vector<float>{0.5f, 0.0f, 3.0f}, {3});
  const LossSpec spec{.type = "sparse_categorical_crossentropy", .from_logits = true};
  double expected = 0;
  for (std::int64_t n = 0; n < 3; ++n)
    expected += weights.data<float>()[n] * loss_value(spec, logits.rows(n, 1), labels.rows(n, 1));
  CHECK(loss_value(spec, logits, labels, weights) == doctest::Approx(expected / 3).epsilon(1e-5));
  // Weights of 1 are the unweighted mean.
  Tensor ones = Tensor::from_vector(std::vector<float>(3, 1.0f), {3});
  CHECK(loss_value(spec, logits, labels, ones) == doctest::Approx(loss_value(spec, logits, labels)).epsilon(1e-6));
}

TEST_CASE("the gradients of huber, mae, smoothed and weighted losses match finite differences") {
  struct Case {
    const char* name;
    LossSpec spec;
    bool sparse;
  };
  const Case cases[] = {
      {"huber", {.type = "huber", .delta = 0.8}, false},
      {"mae", {.type = "mae"}, false},
      {"smoothed sparse", {.type = "sparse_categorical_crossentropy", .from_logits = true, .label_smoothing = 0.1}, true},
      {"smoothed binary", {.type = "binary_crossentropy", .from_logits = true, .label_smoothing = 0.3}, false},
  };
  for (const Case& c : cases) {
    for (bool weighted : {false, true}) {
      CAPTURE(std::string(c.name));
      CAPTURE(weighted);
      Graph g;
      ValueId out = g.input("output", {4, 3});
      ValueId t = c.sparse ? g.input("target", {4}, DType::i32) : g.input("target", {4, 3});
      ValueId w = weighted ? g.input("weight", {4}) : -1;
      ValueId loss = build_loss(g, c.spec, out, t, w);
      // Differences of 0.1..1.0 or more from the target: away from |d| = 0 and |d| = delta.
      Tensor target = c.sparse ? random_labels({4}, 3, 2)
                               : (c.spec.type == "binary_crossentropy" ? Tensor::from_vector(std::vector<float>{1, 0, 1, 0, 0, 1, 1, 1, 0, 0, 1, 0}, {4, 3})
                                                                        : zeros({4, 3}));
      Tensor output = c.sparse || c.spec.type == "binary_crossentropy" ? random_tensor({4, 3}, 3)
                                                                       : away_from_zero(random_tensor({4, 3}, 3, -0.5f, 0.5f), 0.15f);
      if (c.spec.type == "huber")  // keep |d| off delta = 0.8
        for (float& v : std::span(output.data<float>(), 12))
          if (std::abs(std::abs(v) - 0.8f) < 0.05f) v *= 0.8f;
      std::vector<std::pair<ValueId, Tensor>> leaves = {{out, output}, {t, target}};
      if (weighted) leaves.emplace_back(w, Tensor::from_vector(std::vector<float>{0.5f, 2.0f, 0.0f, 1.5f}, {4}));
      check_gradients(g, loss, leaves);
    }
  }
}

TEST_CASE("loss settings that do not apply are config errors at the key") {
  auto error = [](const std::string& yaml) { return error_of<ConfigError>([&] { loss_spec(yaml); }); };
  CHECK(error("{type: mse, label_smoothing: 0.1}").find("<string>:1:") != std::string::npos);
  CHECK(error("{type: mse, label_smoothing: 0.1}").find("label_smoothing is for the cross-entropies, not mse") != std::string::npos);
  CHECK(error("{type: categorical_crossentropy, label_smoothing: 1.0}").find("must lie in [0, 1)") != std::string::npos);
  CHECK(error("{type: mae, delta: 2}").find("delta is huber's, not mae's") != std::string::npos);
  CHECK(error("{type: huber, delta: 0}").find("delta must be above 0") != std::string::npos);
  CHECK(error("{type: huber, from_logits: true}").find("from_logits is for the cross-entropies") != std::string::npos);
  CHECK(error("hubber").find("did you mean 'huber'") != std::string::npos);
}
