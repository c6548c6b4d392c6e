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
  MetricCount count = build_metric(g, metric, loss, output, target);
  Executor exec(g, {count.hits});
  exec.bind(output, scores);
  exec.bind(target, targets);
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

TEST_CASE("metrics: a dense target's label is its largest entry, the best-scored of tied ones") {
  Tensor scores = Tensor::from_vector(std::vector<float>{0.1f, 0.7f, 0.2f,   // wins at class 1
                                                         0.5f, 0.3f, 0.2f},  // wins at class 0
                                      {2, 3});
  // Row 0: label 1 (a probability target); row 1: classes 1 and 2 tie: the best-scored (1) is
  // second of three, so top-1 misses and top-2 hits.
  Tensor targets = Tensor::from_vector(std::vector<float>{0.1f, 0.6f, 0.3f, 0.0f, 0.5f, 0.5f}, {2, 3});
  CHECK(metric_value("accuracy", kDense, scores, targets) == doctest::Approx(0.5));
  CHECK(metric_value("top_2_accuracy", kDense, scores, targets) == doctest::Approx(1.0));
}

TEST_CASE("metrics: scores of any size and a label scored -inf") {
  // The label's score is found by pushing the others to -FLT_MAX, which must
  // not turn into NaN or win over a huge or infinite score.
  const float inf = std::numeric_limits<float>::infinity();
  Tensor scores = Tensor::from_vector(std::vector<float>{3e38f, -3e38f, -inf,  // label 0: the largest finite score
                                                         1.0f, inf, 0.0f,      // label 1: +inf, above everything
                                                         -inf, 0.0f, 1.0f},    // label 0: -inf, below both others
                                      {3, 3});
  Tensor labels = Tensor::from_vector<std::int32_t>({0, 1, 0}, {3});
  CHECK(metric_value("accuracy", kSparse, scores, labels) == doctest::Approx(2.0 / 3));
  CHECK(metric_value("top_2_accuracy", kSparse, scores, labels) == doctest::Approx(2.0 / 3));
  CHECK(metric_value("top_3_accuracy", kSparse, scores, labels) == doctest::Approx(1.0));
}

TEST_CASE("metrics: binary accuracy judges every element against its threshold") {
  Tensor probabilities = Tensor::from_vector(std::vector<float>{0.9f, 0.2f, 0.6f, 0.4f}, {2, 2});
  Tensor targets = Tensor::from_vector(std::vector<float>{1.0f, 1.0f, 0.0f, 0.0f}, {2, 2});
  CHECK(metric_value("accuracy", {.type = "binary_crossentropy"}, probabilities, targets) == doctest::Approx(0.5));
  Tensor logits = Tensor::from_vector(std::vector<float>{0.1f, -0.2f, -0.6f, 0.4f}, {2, 2});
  CHECK(metric_value("accuracy", {.type = "binary_crossentropy", .from_logits = true}, logits, targets) ==
        doctest::Approx(0.5));
  Tensor one_unit = Tensor::from_vector(std::vector<float>{0.0f, 1.0f}, {2, 1});
  CHECK_THROWS_WITH_AS(metric_value("top_2_accuracy", {.type = "mse"}, one_unit, one_unit), doctest::Contains("single unit"),
                       Error);
}
