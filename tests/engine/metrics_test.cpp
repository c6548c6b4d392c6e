// Metrics as graph ops (engine/training/metrics.hpp) against counts by hand.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "engine/graph/executor.hpp"
#include "engine/training/metrics.hpp"
#include "tests/test_util.hpp"

using namespace tessera;

namespace {

// Runs `metric` on fixed scores and targets: its value over that one batch.
double metric_value(const std::string& metric, const LossSpec& loss, const Tensor& scores, const Tensor& targets) {
  Graph g;
  ValueId output = g.input("scores", scores.shape());
  ValueId target = g.input("targets", targets.shape(), targets.dtype());
  std::vector<std::pair<ValueId, Tensor>> constants;
  const std::vector<MetricOps> ops = build_metrics(g, {metric}, loss, output, target, constants);
  Executor exec(g, ops.at(0).sums);
  exec.bind(output, scores);
  exec.bind(target, targets);
  for (const auto& [id, value] : constants) exec.bind(id, value);
  exec.run();
  PassTotals totals;
  totals.samples = scores.shape()[0];
  auto& sums = totals.sums.emplace_back();
  for (ValueId id : ops[0].sums) {
    const std::vector<float> values = exec.output(id).to_vector<float>();
    sums.emplace_back(values.begin(), values.end());
  }
  return totals.evaluation({metric}, ops).metrics.at(metric);
}

const LossSpec kSparse{.type = "sparse_categorical_crossentropy", .from_logits = true};
const LossSpec kDense{.type = "categorical_crossentropy", .from_logits = true};

}  // namespace

TEST_CASE("metrics: top-k accuracy of sparse labels counts the classes scored above the label") {
  // Four rows of four classes; the label's rank (classes strictly above it): 0, 1, 3, 2.
  Tensor scores = Tensor::from_vector(std::vector<float>{0.9f, 0.1f, 0.0f, -1.0f,   // label 0: rank 0
                                                         2.0f, 3.0f, 1.0f, 0.0f,    // label 0: rank 1
                                                         -5.0f, 1.0f, 2.0f, 3.0f,   // label 0: rank 3
                                                         1.0f, 1.0f, 1.0f, 2.0f},   // label 2: rank 1 (ties are not above)
                                      {4, 4});
  Tensor labels = Tensor::from_vector<std::int32_t>({0, 0, 0, 2}, {4});
  CHECK(metric_value("accuracy", kSparse, scores, labels) == doctest::Approx(0.25));
  CHECK(metric_value("top_2_accuracy", kSparse, scores, labels) == doctest::Approx(0.75));
  CHECK(metric_value("top_3_accuracy", kSparse, scores, labels) == doctest::Approx(0.75));
  CHECK(metric_value("top_4_accuracy", kSparse, scores, labels) == doctest::Approx(1.0));
}

TEST_CASE("metrics: a dense target's label is its first largest entry, as Keras' argmax") {
  Tensor scores = Tensor::from_vector(std::vector<float>{0.1f, 0.7f, 0.2f,   // best at class 1
                                                         0.1f, 0.2f, 0.7f,   // best at class 2
                                                         0.2f, 0.5f, 0.3f},  // best at class 1, class 0 last
                                      {3, 3});
  // Row 0: a probability target, label 1: a hit. Row 1: classes 1 and 2 tie;
  // the first (1) is second best: top-1 misses, top-2 hits. Row 2: all zero
  // (padding): label 0, third best: only top-3 hits.
  Tensor targets = Tensor::from_vector(std::vector<float>{0.1f, 0.6f, 0.3f, 0.0f, 0.5f, 0.5f, 0.0f, 0.0f, 0.0f}, {3, 3});
  CHECK(metric_value("accuracy", kDense, scores, targets) == doctest::Approx(1.0 / 3));
  CHECK(metric_value("top_2_accuracy", kDense, scores, targets) == doctest::Approx(2.0 / 3));
  CHECK(metric_value("top_3_accuracy", kDense, scores, targets) == doctest::Approx(1.0));
}

TEST_CASE("metrics: scores of any size and a label scored -inf") {
  // The label's score is found by pushing the others to -FLT_MAX, which must
  // not turn into NaN or win over a huge or infinite score.
  const float inf = std::numeric_limits<float>::infinity();
  Tensor scores = Tensor::from_vector(std::vector<float>{3e38f, -3e38f, -inf,  // label 0: the largest finite score
                                                         1.0f, inf, 0.0f,      // label 1: +inf, above everything
                                                         -inf, 0.0f, 1.0f,     // label 0: -inf, below both others
                                                         1.0f, inf, 0.0f},     // label 0: a wrong class at +inf is above it
                                      {4, 3});
  Tensor labels = Tensor::from_vector<std::int32_t>({0, 1, 0, 0}, {4});
  CHECK(metric_value("accuracy", kSparse, scores, labels) == doctest::Approx(2.0 / 4));
  CHECK(metric_value("top_2_accuracy", kSparse, scores, labels) == doctest::Approx(3.0 / 4));
  CHECK(metric_value("top_3_accuracy", kSparse, scores, labels) == doctest::Approx(1.0));
}

TEST_CASE("metrics: binary accuracy judges every element against its threshold") {
  Tensor probabilities = Tensor::from_vector(std::vector<float>{0.9f, 0.2f, 0.6f, 0.4f}, {2, 2});
  Tensor targets = Tensor::from_vector(std::vector<float>{1.0f, 1.0f, 0.0f, 0.0f}, {2, 2});
  CHECK(metric_value("accuracy", {.type = "binary_crossentropy"}, probabilities, targets) == doctest::Approx(0.5));
  Tensor logits = Tensor::from_vector(std::vector<float>{0.1f, -0.2f, -0.6f, 0.4f}, {2, 2});
  CHECK(metric_value("accuracy", {.type = "binary_crossentropy", .from_logits = true}, logits, targets) ==
        doctest::Approx(0.5));
  // A sparse loss on one unit: i32 labels [2] against scores [2, 1], as binary accuracy.
  Tensor unit_scores = Tensor::from_vector(std::vector<float>{0.9f, 0.7f}, {2, 1});
  CHECK(metric_value("accuracy", kSparse, unit_scores, Tensor::from_vector<std::int32_t>({1, 0}, {2})) ==
        doctest::Approx(0.5));
  Tensor one_unit = Tensor::from_vector(std::vector<float>{0.0f, 1.0f}, {2, 1});
  CHECK_THROWS_WITH_AS(metric_value("top_2_accuracy", {.type = "mse"}, one_unit, one_unit), doctest::Contains("single unit"),
                       Error);
}

TEST_CASE("metrics: mae and mse are the mean absolute and squared differences") {
  Tensor outputs = Tensor::from_vector(std::vector<float>{1.0f, 2.0f, -1.0f, 0.5f}, {2, 2});
  Tensor targets = Tensor::from_vector(std::vector<float>{0.0f, 4.0f, -1.0f, 1.5f}, {2, 2});
  CHECK(metric_value("mae", {.type = "mse"}, outputs, targets) == doctest::Approx((1 + 2 + 0 + 1) / 4.0));
  CHECK(metric_value("mean_squared_error", {.type = "mse"}, outputs, targets) == doctest::Approx((1 + 4 + 0 + 1) / 4.0));
  CHECK(metric_refusal("mae", kSparse).find("class ids") != std::string::npos);
}

TEST_CASE("metrics: precision and recall count true and false positives at 0.5, logits through a sigmoid") {
  // Decisions (> 0.5): yes, yes, no, yes, no, no; targets: 1, 0, 1, 1, 0, 1.
  // TP 2 (elements 0, 3), FP 1 (element 1), FN 2 (elements 2, 5).
  Tensor probabilities = Tensor::from_vector(std::vector<float>{0.9f, 0.6f, 0.4f, 0.7f, 0.1f, 0.5f}, {6, 1});
  Tensor targets = Tensor::from_vector(std::vector<float>{1, 0, 1, 1, 0, 1}, {6, 1});
  const LossSpec binary{.type = "binary_crossentropy"};
  CHECK(metric_value("precision", binary, probabilities, targets) == doctest::Approx(2.0 / 3));
  CHECK(metric_value("recall", binary, probabilities, targets) == doctest::Approx(2.0 / 4));
  // The same decisions from logits: log(p / (1 - p)).
  std::vector<float> logits;
  for (float p : probabilities.to_vector<float>()) logits.push_back(p == 0.5f ? -1e-3f : std::log(p / (1 - p)));
  const LossSpec from_logits{.type = "binary_crossentropy", .from_logits = true};
  CHECK(metric_value("precision", from_logits, Tensor::from_vector(logits, {6, 1}), targets) == doctest::Approx(2.0 / 3));
  CHECK(metric_value("recall", from_logits, Tensor::from_vector(logits, {6, 1}), targets) == doctest::Approx(2.0 / 4));
  // No positive decision: precision is 0, not NaN (Keras' divide_no_nan).
  CHECK(metric_value("precision", binary, Tensor::from_vector(std::vector<float>(6, 0.1f), {6, 1}), targets) == 0.0);
}

TEST_CASE("metrics: precision of sparse labels judges every class's entry of a softmax, one-vs-rest") {
  // Softmax of these logits puts > 0.5 on class 0 (row 0, right), class 1 (row 1,
  // wrong: label 2) and nowhere in row 2 (label 1).
  Tensor logits = Tensor::from_vector(std::vector<float>{3, 0, 0, 0, 3, 0, 0, 0, 0}, {3, 3});
  Tensor labels = Tensor::from_vector<std::int32_t>({0, 2, 1}, {3});
  CHECK(metric_value("precision", kSparse, logits, labels) == doctest::Approx(1.0 / 2));
  CHECK(metric_value("recall", kSparse, logits, labels) == doctest::Approx(1.0 / 3));
}

TEST_CASE("metrics: auc is the ROC area, the probability that a positive outscores a negative") {
  // Scores well apart from one another (more than Keras' threshold step of 1/199):
  // the thresholded curve is then the exact one.
  const std::vector<float> scores = {0.9f, 0.8f, 0.7f, 0.6f, 0.55f, 0.4f, 0.3f, 0.2f, 0.45f, 0.05f};
  const std::vector<float> labels = {1, 1, 0, 1, 0, 1, 0, 0, 0, 1};
  double wins = 0, pairs = 0;
  for (std::size_t i = 0; i < scores.size(); ++i)
    for (std::size_t j = 0; j < scores.size(); ++j)
      if (labels[i] == 1 && labels[j] == 0) {
        pairs += 1;
        wins += scores[i] > scores[j] ? 1.0 : 0.0;
      }
  const double area = metric_value("auc", {.type = "binary_crossentropy"}, Tensor::from_vector(scores, {10, 1}),
                                   Tensor::from_vector(labels, {10, 1}));
  CHECK(area == doctest::Approx(wins / pairs).epsilon(1e-6));
  CHECK(wins / pairs == doctest::Approx(16.0 / 25));  // counted by hand: 5 + 5 + 4 + 2 + 0 wins
  // Perfectly separated scores: 1; reversed: 0.
  const std::vector<float> ordered = {0.9f, 0.8f, 0.2f, 0.1f}, bits = {1, 1, 0, 0}, reversed = {0, 0, 1, 1};
  CHECK(metric_value("auc", {.type = "binary_crossentropy"}, Tensor::from_vector(ordered, {4, 1}),
                     Tensor::from_vector(bits, {4, 1})) == doctest::Approx(1.0));
  CHECK(metric_value("auc", {.type = "binary_crossentropy"}, Tensor::from_vector(ordered, {4, 1}),
                     Tensor::from_vector(reversed, {4, 1})) == doctest::Approx(0.0));
}

TEST_CASE("metrics: a pass's precision is that of all its samples, not a mean over batches") {
  // Batch 1: one yes, right (precision 1). Batch 2: four yes, one right (0.25).
  // Over both: 2 of 5, where a mean of the batches would say 0.625.
  MetricOps precision{{}, [](const std::vector<std::vector<double>>& totals, std::int64_t) {
                        return totals[0][0] / totals[1][0];
                      }};
  auto batch = [](double tp, double yes, std::int64_t samples) {
    PassTotals t;
    t.samples = samples;
    t.sums = {{{tp}, {yes}}};
    return t;
  };
  PassTotals pass;
  pass.add(batch(1, 1, 2));
  pass.add(batch(1, 4, 4));
  CHECK(pass.evaluation({"precision"}, {precision}).metrics.at("precision") == doctest::Approx(0.4));
  CHECK(pass.samples == 6);
}
