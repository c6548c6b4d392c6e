// Metrics as graph ops (engine/training/metrics.hpp) against counts by hand.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "engine/graph/executor.hpp"
#include "engine/training/metrics.hpp"
#include "tests/test_util.hpp"

using namespace tessera;

namespace {

// Runs `metric` on fixed scores and targets; returns hits / cases.
double metric_value(const std::string& metric, const LossSpec& loss, const Tensor& scores, const Tensor& targets) {
  Graph g;
  ValueId output = g.input("scores", scores.shape());
  ValueId target = g.input("targets", targets.shape(), targets.dtype());
  std::vector<std::pair<ValueId, Tensor>> constants;
  MetricCount count = build_metrics(g, {metric}, loss, output, target, constants).at(0);
  Executor exec(g, {count.hits});
  exec.bind(output, scores);
  exec.bind(target, targets);
  for (const auto& [id, value] : constants) exec.bind(id, value);
  exec.run();
  return exec.output(count.hits).to_vector<float>()[0] / count.cases;
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
