#include "engine/training/metrics.hpp"

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

// 1 where a > b, else 0, as f32.
// 1 where a > b, else 0, as f32.
ValueId greater(Graph& g, ValueId a, ValueId b) { return g.binary(BinaryOp::greater, a, b); }

// Binary accuracy: elements on the target's side of the threshold.
MetricCount binary_accuracy(Graph& g, const LossSpec& loss, ValueId output, ValueId target) {
  const Shape scores = g.shape(output);
  // A sparse loss on one unit: i32 labels [...] for scores [..., 1].
  if (g.dtype(target) != DType::f32) target = g.cast(target, DType::f32);
  if (g.shape(target) != scores) target = g.reshape(target, scores);
  const double threshold = loss.type == "binary_crossentropy" && loss.from_logits ? 0.0 : 0.5;
  ValueId agree = g.binary(BinaryOp::equal, greater(g, output, g.fill({}, threshold)), greater(g, target, g.fill({}, 0.5)));
  return {g.reduce(ReduceOp::sum, agree, all_axes(scores.rank())), static_cast<double>(scores.numel())};
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
    for (std::int64_t c = 0; c < classes; ++c) indices[static_cast<std::size_t>(c)] = static_cast<float>(c);
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

}  // namespace

const std::vector<std::string>& metric_names() {
  static const std::vector<std::string> names = {"accuracy", "top_<k>_accuracy"};
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

std::vector<MetricCount> build_metrics(Graph& g, const std::vector<std::string>& metrics, const LossSpec& loss,
                                       ValueId output, ValueId target,
                                       std::vector<std::pair<ValueId, Tensor>>& constants) {
  std::vector<MetricCount> counts;
  if (metrics.empty()) return counts;
  // Scores are compared in f32 whatever the model computes in.
  if (g.dtype(output) != DType::f32) output = g.cast(output, DType::f32);
  const Shape scores = g.shape(output);
  const std::int64_t classes = scores[scores.rank() - 1];
  const bool binary = loss.type == "binary_crossentropy" || classes == 1;
  ValueId above = -1;  // shared by every top-k metric
  for (const std::string& metric : metrics) {
    const int k = metric_top_k(metric);
    if (k < 1) throw Error("unknown metric '" + metric + "'");
    if (binary) {
      if (k != 1)
        throw Error("metric '" + metric + "' ranks classes, but the model's output has a single unit: use 'accuracy'");
      counts.push_back(binary_accuracy(g, loss, output, target));
      continue;
    }
    if (above < 0) above = classes_above_label(g, output, target, constants);
    ValueId hit = greater(g, g.fill({}, static_cast<double>(k)), above);
    counts.push_back({g.reduce(ReduceOp::sum, hit, all_axes(scores.rank())), static_cast<double>(scores.numel() / classes)});
  }
  return counts;
}

}  // namespace tessera
