#include "engine/training/metrics.hpp"

#include <algorithm>
#include <limits>
#include <numeric>

#include "engine/core/error.hpp"

namespace tessera {
namespace {

std::vector<int> all_axes(int rank) {
  std::vector<int> axes(static_cast<std::size_t>(rank));
  std::iota(axes.begin(), axes.end(), 0);
  return axes;
}

// Keras' names for the same metric.
std::string canonical(const std::string& name) {
  if (name == "mean_absolute_error") return "mae";
  if (name == "mean_squared_error") return "mse";
  return name;
}

bool is_binary(const LossSpec& loss) { return loss.type == "binary_crossentropy"; }
bool is_decision(const std::string& name) { return name == "precision" || name == "recall" || name == "auc"; }

// 1 where a > b, else 0, as f32.
ValueId greater(Graph& g, ValueId a, ValueId b) { return g.binary(BinaryOp::greater, a, b); }

double ratio(double numerator, double denominator) { return denominator == 0 ? 0 : numerator / denominator; }

// A metric of one scalar sum: its total over `per_sample` elements a sample.
MetricOps mean_of(ValueId sum, double per_sample) {
  return {{sum}, [per_sample](const std::vector<std::vector<double>>& totals, std::int64_t samples) {
            return ratio(totals[0][0], per_sample * static_cast<double>(samples));
          }};
}

// The target as 0/1 per element of `scores`: a one-hot sparse label, or a dense
// (or single-unit) target thresholded at 0.5.
ValueId decision_labels(Graph& g, ValueId target, const Shape& scores) {
  const std::int64_t classes = scores[scores.rank() - 1];
  if (g.dtype(target) == DType::i32 && classes > 1 && g.shape(target) != scores) return g.one_hot(target, classes);
  if (g.dtype(target) != DType::f32) target = g.cast(target, DType::f32);
  if (g.shape(target) != scores) target = g.reshape(target, scores);
  return greater(g, target, g.fill({}, 0.5));
}

// The scores as probabilities: logits through a sigmoid (binary) or softmax.
ValueId probabilities(Graph& g, const LossSpec& loss, ValueId output, bool binary) {
  if (!loss.from_logits) return output;
  return binary ? g.unary(UnaryOp::sigmoid, output) : g.softmax(output, -1);
}

// Binary accuracy: elements on the target's side of the threshold.
MetricOps binary_accuracy(Graph& g, const LossSpec& loss, ValueId output, ValueId target) {
  const Shape scores = g.shape(output);
  ValueId label = decision_labels(g, target, scores);
  const double threshold = is_binary(loss) && loss.from_logits ? 0.0 : 0.5;
  ValueId agree = g.binary(BinaryOp::equal, greater(g, output, g.fill({}, threshold)), label);
  return mean_of(g.reduce(ReduceOp::sum, agree, all_axes(scores.rank())),
                 static_cast<double>(scores.numel() / scores[0]));
}

// Per row, how many classes score above the label's class: [..., 1].
ValueId classes_above_label(Graph& g, ValueId output, ValueId target,
                            std::vector<std::pair<ValueId, Tensor>>& constants) {
  const Shape shape = g.shape(output);
  const int class_axis = shape.rank() - 1;
  const std::int64_t classes = shape[class_axis];
  // Infinities become the largest finite scores: a mask times a score below
  // must never meet 0 * inf.
  const double largest = std::numeric_limits<float>::max();
  ValueId scores = g.binary(BinaryOp::min, g.binary(BinaryOp::max, output, g.fill({}, -largest)), g.fill({}, largest));
  // 1 at the label's class, else 0.
  ValueId label;
  if (g.dtype(target) == DType::i32) {
    label = g.one_hot(target, classes);
  } else {
    // The first largest entry (Keras' argmax): among the maxima, the smallest class index.
    std::vector<float> indices(static_cast<std::size_t>(classes));
    std::iota(indices.begin(), indices.end(), 0.0f);
    ValueId index = g.input("metrics/class_index", {classes});
    constants.emplace_back(index, Tensor::from_vector(indices, {classes}));
    ValueId is_max = g.binary(BinaryOp::equal, target, g.reduce(ReduceOp::max, target, {class_axis}, true));
    // Index where a maximum is, else `classes`; the first is the largest negation.
    ValueId candidate = g.add(index, g.scale(g.sub(g.fill({}, 1.0), is_max), static_cast<double>(classes)));
    ValueId first = g.reduce(ReduceOp::max, g.unary(UnaryOp::neg, candidate), {class_axis}, true);
    label = g.binary(BinaryOp::equal, g.unary(UnaryOp::neg, index), first);
  }
  // One 1 per row: the sum is the label's score, exactly.
  ValueId label_score = g.reduce(ReduceOp::sum, g.mul(label, scores), {class_axis}, true);
  return g.reduce(ReduceOp::sum, greater(g, scores, label_score), {class_axis}, true);
}

// Keras' AUC thresholds: (i + 1) / (T - 1) for i < T - 2, bracketed by
// -epsilon and 1 + epsilon so that scores of exactly 0 and 1 fall inside.
std::vector<float> auc_thresholds() {
  constexpr int kThresholds = 200;
  std::vector<float> t = {-1e-7f};
  for (int i = 0; i < kThresholds - 2; ++i) t.push_back(static_cast<float>(i + 1) / (kThresholds - 1));
  t.push_back(1.0f + 1e-7f);
  return t;
}

// Area under the ROC curve from true and false positives at each threshold.
double roc_area(const std::vector<double>& tp, const std::vector<double>& predicted, double positives, double negatives) {
  double area = 0;
  for (std::size_t i = 0; i + 1 < tp.size(); ++i) {
    const double fpr = ratio(predicted[i] - tp[i], negatives), next_fpr = ratio(predicted[i + 1] - tp[i + 1], negatives);
    const double tpr = ratio(tp[i], positives), next_tpr = ratio(tp[i + 1], positives);
    area += (fpr - next_fpr) * (tpr + next_tpr) / 2;
  }
  return area;
}

// Precision, recall or AUC over every element's yes/no decision.
MetricOps decision_metric(Graph& g, const std::string& name, const LossSpec& loss, ValueId output, ValueId target,
                          bool binary, std::vector<std::pair<ValueId, Tensor>>& constants) {
  const Shape scores = g.shape(output);
  const std::vector<int> axes = all_axes(scores.rank());
  ValueId label = decision_labels(g, target, scores);
  ValueId p = probabilities(g, loss, output, binary);
  if (name == "auc") {
    const std::vector<float> thresholds = auc_thresholds();
    const auto count = static_cast<std::int64_t>(thresholds.size());
    ValueId t = g.input("metrics/auc_thresholds", {count});
    constants.emplace_back(t, Tensor::from_vector(thresholds, {count}));
    std::vector<std::int64_t> dims = scores.dims();
    dims.push_back(1);
    // [..., 1] against [T]: a decision per element and threshold.
    ValueId above = greater(g, g.reshape(p, Shape(dims)), t);
    ValueId tp = g.reduce(ReduceOp::sum, g.mul(above, g.reshape(label, Shape(dims))), axes);
    ValueId predicted = g.reduce(ReduceOp::sum, above, axes);
    ValueId positives = g.reduce(ReduceOp::sum, label, axes);
    const double per_sample = static_cast<double>(scores.numel() / scores[0]);
    return {{tp, predicted, positives}, [per_sample](const std::vector<std::vector<double>>& totals, std::int64_t samples) {
              const double positives = totals[2][0];
              return roc_area(totals[0], totals[1], positives, per_sample * static_cast<double>(samples) - positives);
            }};
  }
  ValueId yes = greater(g, p, g.fill({}, 0.5));
  ValueId tp = g.reduce(ReduceOp::sum, g.mul(yes, label), axes);
  ValueId denominator = g.reduce(ReduceOp::sum, name == "precision" ? yes : label, axes);
  return {{tp, denominator}, [](const std::vector<std::vector<double>>& totals, std::int64_t) {
            return ratio(totals[0][0], totals[1][0]);
          }};
}

}  // namespace

const std::vector<std::string>& metric_names() {
  static const std::vector<std::string> names = {"accuracy", "top_<k>_accuracy", "mae", "mse", "precision", "recall", "auc"};
  return names;
}

int metric_top_k(const std::string& name) {
  if (name == "accuracy") return 1;
  constexpr std::string_view prefix = "top_", suffix = "_accuracy";
  if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return 0;
  std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.empty() || digits.size() > 4 || digits.find_first_not_of("0123456789") != std::string::npos) return 0;
  return std::stoi(digits);
}

bool is_metric(const std::string& name) {
  const std::string metric = canonical(name);
  return metric_top_k(metric) > 0 || metric == "mae" || metric == "mse" || is_decision(metric);
}

std::string metric_refusal(const std::string& name, const LossSpec& loss) {
  if (!is_metric(name)) return "unknown metric '" + name + "'";
  const std::string metric = canonical(name);
  if (const int k = metric_top_k(metric); k > 0)
    return k > 1 && is_binary(loss) ? "'" + name + "' ranks classes, which binary_crossentropy does not have: use 'accuracy'"
                                    : "";
  if (metric == "mae" || metric == "mse")
    return loss.type == "sparse_categorical_crossentropy"
               ? "'" + name + "' compares outputs with targets of the same shape, but " + loss.type +
                     "'s targets are class ids (use categorical_crossentropy with one-hot targets)"
               : "";
  return "";
}

std::vector<MetricOps> build_metrics(Graph& g, const std::vector<std::string>& metrics, const LossSpec& loss,
                                     ValueId output, ValueId target,
                                     std::vector<std::pair<ValueId, Tensor>>& constants) {
  std::vector<MetricOps> ops;
  if (metrics.empty()) return ops;
  // Scores are compared in f32 whatever the model computes in.
  if (g.dtype(output) != DType::f32) output = g.cast(output, DType::f32);
  const Shape scores = g.shape(output);
  const std::int64_t classes = scores[scores.rank() - 1];
  const bool binary = is_binary(loss) || classes == 1;
  ValueId above = -1;  // shared by every top-k metric
  for (const std::string& name : metrics) {
    if (std::string why = metric_refusal(name, loss); !why.empty()) throw Error(why);
    const std::string metric = canonical(name);
    if (metric == "mae" || metric == "mse") {
      ValueId diff = g.sub(output, g.dtype(target) == DType::f32 ? target : g.cast(target, DType::f32));
      ValueId error = metric == "mae" ? g.unary(UnaryOp::abs, diff) : g.mul(diff, diff);
      ops.push_back(mean_of(g.reduce(ReduceOp::sum, error, all_axes(scores.rank())),
                            static_cast<double>(scores.numel() / scores[0])));
      continue;
    }
    if (is_decision(metric)) {
      ops.push_back(decision_metric(g, metric, loss, output, target, binary, constants));
      continue;
    }
    const int k = metric_top_k(metric);
    if (binary) {
      if (k != 1)
        throw Error("metric '" + name + "' ranks classes, but the model's output has a single unit: use 'accuracy'");
      ops.push_back(binary_accuracy(g, loss, output, target));
      continue;
    }
    if (above < 0) above = classes_above_label(g, output, target, constants);
    ValueId hit = greater(g, g.fill({}, static_cast<double>(k)), above);
    ops.push_back(mean_of(g.reduce(ReduceOp::sum, hit, all_axes(scores.rank())),
                          static_cast<double>(scores.numel() / scores[0] / classes)));
  }
  return ops;
}

void PassTotals::add(const PassTotals& other) {
  loss += other.loss;
  samples += other.samples;
  if (sums.empty()) {
    sums = other.sums;
    return;
  }
  for (std::size_t m = 0; m < sums.size(); ++m)
    for (std::size_t s = 0; s < sums[m].size(); ++s)
      for (std::size_t i = 0; i < sums[m][s].size(); ++i) sums[m][s][i] += other.sums[m][s][i];
}

bool PassTotals::same_metrics(const PassTotals& other) const {
  if (sums.size() != other.sums.size()) return false;
  for (std::size_t m = 0; m < sums.size(); ++m) {
    if (sums[m].size() != other.sums[m].size()) return false;
    for (std::size_t s = 0; s < sums[m].size(); ++s)
      if (sums[m][s].size() != other.sums[m][s].size()) return false;
  }
  return true;
}

Evaluation PassTotals::evaluation(const std::vector<std::string>& names, const std::vector<MetricOps>& metrics) const {
  Evaluation e;
  e.samples = samples;
  if (samples == 0) return e;
  e.loss = loss / static_cast<double>(samples);
  for (std::size_t m = 0; m < metrics.size() && m < sums.size(); ++m) e.metrics[names[m]] = metrics[m].value(sums[m], samples);
  return e;
}

}  // namespace tessera
