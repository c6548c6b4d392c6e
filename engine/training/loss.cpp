#include "engine/training/loss.hpp"

#include <algorithm>

#include "engine/config/config.hpp"

namespace tessera {
namespace {

const std::vector<std::string> kLosses = {"sparse_categorical_crossentropy", "categorical_crossentropy",
                                          "binary_crossentropy", "mse"};

std::vector<int> all_axes(const Shape& s) {
  std::vector<int> axes(static_cast<std::size_t>(s.rank()));
  for (int i = 0; i < s.rank(); ++i) axes[i] = i;
  return axes;
}

// Probabilities clipped into [epsilon, 1 - epsilon] as Keras does (epsilon 1e-7):
// no log of 0 on either side.
ValueId clipped(Graph& g, ValueId p) {
  return g.binary(BinaryOp::min, g.binary(BinaryOp::max, p, g.fill({}, 1e-7)), g.fill({}, 1.0 - 1e-7));
}

}  // namespace

LossSpec parse_loss(ConfigNode node) {
  LossSpec spec;
  if (node.is_scalar()) {
    spec.type = node.as<std::string>();
  } else {
    node.expect_keys({"type", "from_logits"});
    spec.type = node["type"].as<std::string>();
    spec.from_logits = node.get<bool>("from_logits", false);
  }
  if (spec.type == "mean_squared_error") spec.type = "mse";
  if (std::find(kLosses.begin(), kLosses.end(), spec.type) == kLosses.end())
    node.fail_unknown("loss", spec.type, kLosses);
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

ValueId build_loss(Graph& g, const LossSpec& loss, ValueId output, ValueId target) {
  Shape out = g.shape(output);
  if (loss.type == "sparse_categorical_crossentropy" || loss.type == "categorical_crossentropy") {
    // Probabilities are first scaled to sum to 1 over the classes, as Keras does.
    ValueId log_p = loss.from_logits
                        ? g.softmax(output, -1, /*log=*/true)
                        : g.unary(UnaryOp::log, clipped(g, g.div(output, g.reduce(ReduceOp::sum, output, {out.rank() - 1},
                                                                                   /*keepdims=*/true))));
    ValueId probs = loss.type == "categorical_crossentropy" ? target : g.one_hot(target, out[out.rank() - 1]);
    double rows = static_cast<double>(out.numel() / out[out.rank() - 1]);
    return g.scale(g.reduce(ReduceOp::sum, g.mul(log_p, probs), all_axes(out)), -1.0 / rows);
  }
  if (loss.type == "binary_crossentropy") {
    ValueId per_element;
    if (loss.from_logits) {
      // max(x, 0) - x*y + log(1 + exp(-|x|)): stable for large |x|.
      ValueId softplus = g.unary(UnaryOp::log, g.add(g.fill({}, 1.0),
                                                     g.unary(UnaryOp::exp, g.unary(UnaryOp::neg, g.unary(UnaryOp::abs, output)))));
      per_element = g.add(g.sub(g.unary(UnaryOp::relu, output), g.mul(output, target)), softplus);
    } else {
      ValueId one = g.fill({}, 1.0), p = clipped(g, output);
      per_element = g.unary(UnaryOp::neg, g.add(g.mul(target, g.unary(UnaryOp::log, p)),
                                                 g.mul(g.sub(one, target), g.unary(UnaryOp::log, g.sub(one, p)))));
    }
    return g.reduce(ReduceOp::mean, per_element, all_axes(out));
  }
  ValueId diff = g.sub(output, target);  // mse
  return g.reduce(ReduceOp::mean, g.mul(diff, diff), all_axes(out));
}

}  // namespace tessera
