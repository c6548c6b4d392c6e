#include "engine/training/loss.hpp"

#include <algorithm>
#include <numeric>

#include "engine/config/config.hpp"

namespace tessera {
namespace {

bool is_crossentropy(const std::string& type) { return type.find("crossentropy") != std::string::npos; }

std::vector<int> axes_from(int first, int rank) {
  std::vector<int> axes(static_cast<std::size_t>(std::max(0, rank - first)));
  std::iota(axes.begin(), axes.end(), first);
  return axes;
}

// Probabilities clipped into [epsilon, 1 - epsilon] as Keras does (epsilon 1e-7):
// no log of 0 on either side.
ValueId clipped(Graph& g, ValueId p) {
  return g.binary(BinaryOp::min, g.binary(BinaryOp::max, p, g.fill({}, 1e-7)), g.fill({}, 1.0 - 1e-7));
}

// y (1 - s) + s / classes: targets smoothed toward uniform.
ValueId smoothed(Graph& g, ValueId y, double s, double classes) {
  if (s == 0) return y;
  return g.add(g.scale(y, 1.0 - s), g.fill({}, s / classes));
}

// Each element's loss: [N, ...] as the output, or for the categorical
// cross-entropies one per position (the class axis summed away).
ValueId element_losses(Graph& g, const LossSpec& loss, ValueId output, ValueId target) {
  const Shape out = g.shape(output);
  if (loss.type == "sparse_categorical_crossentropy" || loss.type == "categorical_crossentropy") {
    const std::int64_t classes = out[out.rank() - 1];
    // Probabilities are first scaled to sum to 1 over the classes, as Keras does.
    ValueId log_p = loss.from_logits
                        ? g.softmax(output, -1, /*log=*/true)
                        : g.unary(UnaryOp::log, clipped(g, g.div(output, g.reduce(ReduceOp::sum, output, {out.rank() - 1},
                                                                                   /*keepdims=*/true))));
    ValueId probs = loss.type == "categorical_crossentropy" ? target : g.one_hot(target, classes);
    probs = smoothed(g, probs, loss.label_smoothing, static_cast<double>(classes));
    return g.unary(UnaryOp::neg, g.reduce(ReduceOp::sum, g.mul(log_p, probs), {out.rank() - 1}));
  }
  if (loss.type == "binary_crossentropy") {
    target = smoothed(g, target, loss.label_smoothing, 2.0);
    if (loss.from_logits) {
      // max(x, 0) - x*y + log(1 + exp(-|x|)): stable for large |x|.
      ValueId softplus = g.unary(UnaryOp::log, g.add(g.fill({}, 1.0),
                                                     g.unary(UnaryOp::exp, g.unary(UnaryOp::neg, g.unary(UnaryOp::abs, output)))));
      return g.add(g.sub(g.unary(UnaryOp::relu, output), g.mul(output, target)), softplus);
    }
    ValueId one = g.fill({}, 1.0), p = clipped(g, output);
    return g.unary(UnaryOp::neg, g.add(g.mul(target, g.unary(UnaryOp::log, p)),
                                       g.mul(g.sub(one, target), g.unary(UnaryOp::log, g.sub(one, p)))));
  }
  ValueId diff = g.sub(output, target);
  if (loss.type == "mae") return g.unary(UnaryOp::abs, diff);
  if (loss.type == "huber") {
    // 0.5 q^2 + delta (|d| - q) with q = min(|d|, delta): quadratic up to
    // delta, then linear, and one expression for both sides.
    ValueId a = g.unary(UnaryOp::abs, diff);
    ValueId q = g.binary(BinaryOp::min, a, g.fill({}, loss.delta));
    return g.add(g.scale(g.mul(q, q), 0.5), g.scale(g.sub(a, q), loss.delta));
  }
  return g.mul(diff, diff);  // mse
}

}  // namespace

const std::vector<std::string>& loss_names() {
  static const std::vector<std::string> names = {"sparse_categorical_crossentropy", "categorical_crossentropy",
                                                 "binary_crossentropy", "mse", "mae", "huber"};
  return names;
}

LossSpec parse_loss(ConfigNode node) {
  LossSpec spec;
  if (node.is_scalar()) {
    spec.type = node.as<std::string>();
  } else {
    node.expect_keys({"type", "from_logits", "label_smoothing", "delta"});
    spec.type = node["type"].as<std::string>();
    spec.from_logits = node.get<bool>("from_logits", false);
  }
  if (spec.type == "mean_squared_error") spec.type = "mse";
  if (spec.type == "mean_absolute_error") spec.type = "mae";
  const auto& names = loss_names();
  if (std::find(names.begin(), names.end(), spec.type) == names.end()) node.fail_unknown("loss", spec.type, names);
  if (node.is_scalar()) return spec;
  if (auto smoothing = node.find("label_smoothing")) {
    if (!is_crossentropy(spec.type)) smoothing->fail("label_smoothing is for the cross-entropies, not " + spec.type);
    spec.label_smoothing = smoothing->as<double>();
    if (!(spec.label_smoothing >= 0 && spec.label_smoothing < 1)) smoothing->fail("label_smoothing must lie in [0, 1)");
  }
  if (auto delta = node.find("delta")) {
    if (spec.type != "huber") delta->fail("delta is huber's, not " + spec.type + "'s");
    spec.delta = delta->as<double>();
    if (!(spec.delta > 0)) delta->fail("delta must be above 0");
  }
  if (spec.from_logits && !is_crossentropy(spec.type))
    node["from_logits"].fail("from_logits is for the cross-entropies, not " + spec.type);
  return spec;
}

DType loss_target_dtype(const LossSpec& loss) {
  return loss.type == "sparse_categorical_crossentropy" ? DType::i32 : DType::f32;
}

Shape loss_target_shape(const LossSpec& loss, const Shape& output) {
  if (loss.type != "sparse_categorical_crossentropy") return output;
  auto dims = output.dims();
  dims.pop_back();
  return Shape(dims);
}

ValueId build_loss(Graph& g, const LossSpec& loss, ValueId output, ValueId target, ValueId sample_weight) {
  ValueId terms = element_losses(g, loss, output, target);
  const Shape shape = g.shape(terms);
  if (sample_weight < 0) return g.reduce(ReduceOp::mean, terms, axes_from(0, shape.rank()));
  ValueId per_sample = shape.rank() > 1 ? g.reduce(ReduceOp::mean, terms, axes_from(1, shape.rank())) : terms;
  return g.scale(g.reduce(ReduceOp::sum, g.mul(per_sample, sample_weight), {0}),
                 1.0 / static_cast<double>(shape[0]));
}

}  // namespace tessera
