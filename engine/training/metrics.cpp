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
ValueId greater(Graph& g, ValueId a, ValueId b) { return g.binary(BinaryOp::greater, a, b); }

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

MetricCount build_metric(Graph& g, const std::string& metric, const LossSpec& loss, ValueId output, ValueId target) {
  const int k = metric_top_k(metric);
  if (k < 1) throw Error("unknown metric '" + metric + "'");
  // Scores are compared in f32 whatever the model computes in.
  if (g.dtype(output) != DType::f32) output = g.cast(output, DType::f32);
  const Shape scores = g.shape(output);
  const int class_axis = scores.rank() - 1;
  const std::int64_t classes = scores[class_axis];
  if (loss.type == "binary_crossentropy" || classes == 1) {
    if (k != 1)
      throw Error("metric '" + metric + "' ranks classes, but the model's output has a single unit: use 'accuracy'");
    const double threshold = loss.type == "binary_crossentropy" && loss.from_logits ? 0.0 : 0.5;
    ValueId agree = g.binary(BinaryOp::equal, greater(g, output, g.fill({}, threshold)),
                             greater(g, target, g.fill({}, 0.5)));
    return {g.reduce(ReduceOp::sum, agree, all_axes(scores.rank())), static_cast<double>(scores.numel())};
  }
  // 1 at the label's class (the tied maxima of a dense target), else 0.
  ValueId label = g.dtype(target) == DType::i32
                      ? g.one_hot(target, classes)
                      : g.binary(BinaryOp::equal, target,
                                 g.broadcast_to(g.reduce(ReduceOp::max, target, {class_axis}, true), scores));
  // The label's score: the largest score where the label is (others pushed to
  // -FLT_MAX; a subtraction, so an infinite score never meets a 0 factor).
  const double lowest = std::numeric_limits<float>::max();
  ValueId pushed = g.sub(output, g.scale(g.sub(g.fill({}, 1.0), label), lowest));
  ValueId label_score = g.broadcast_to(g.reduce(ReduceOp::max, pushed, {class_axis}, true), scores);
  ValueId higher = g.reduce(ReduceOp::sum, greater(g, output, label_score), {class_axis}, true);
  ValueId hit = greater(g, g.fill({}, static_cast<double>(k)), higher);
  return {g.reduce(ReduceOp::sum, hit, all_axes(scores.rank())), static_cast<double>(scores.numel() / classes)};
}

}  // namespace tessera
