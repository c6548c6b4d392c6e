// LayerNormalization over the last axis, with learned scale (gamma) and
// offset (beta).
#include "engine/config/config.hpp"
#include "layers/catalog.hpp"

namespace tessera {
namespace {

class LayerNormalization final : public Layer {
 public:
  LayerNormalization(const std::string& name, float epsilon, bool center, bool scale)
      : Layer("LayerNormalization", name), epsilon_(epsilon), center_(center), scale_(scale) {}

  bool row_wise() const override { return true; }
  ValueId call(LayerContext& ctx, const std::vector<ValueId>& inputs) override {
    Graph& g = ctx.graph;
    Shape in = g.shape(inputs[0]);
    Shape features{in[in.rank() - 1]};
    // Without scale/center the kernel still takes gamma/beta: constant ones/zeros.
    ValueId gamma = scale_ ? ctx.variable("gamma", features, {.kind = InitializerKind::ones}, {""})
                           : g.fill(features, 1.0);
    ValueId beta = center_ ? ctx.variable("beta", features, {.kind = InitializerKind::zeros}, {""})
                           : g.fill(features, 0.0);
    return g.layer_norm(inputs[0], gamma, beta, epsilon_)[0];
  }
  TensorSplit tensor_split() const override { return TensorSplit::needs_whole("needs whole features"); }

 private:
  float epsilon_;
  bool center_, scale_;
};

// BatchNormalization over every axis but the last (the features). Training
// normalises with the batch's mean and (biased) variance and moves the
// non-trainable moving_mean / moving_variance towards them; inference uses the
// moving statistics. Built from primitive ops, so autodiff needs no rule of its own.
class BatchNormalization final : public Layer {
 public:
  BatchNormalization(const std::string& name, float momentum, float epsilon, bool center, bool scale)
      : Layer("BatchNormalization", name), momentum_(momentum), epsilon_(epsilon), center_(center), scale_(scale) {}

  bool row_wise() const override { return true; }
  ValueId call(LayerContext& ctx, const std::vector<ValueId>& inputs) override {
    Graph& g = ctx.graph;
    ValueId x = inputs[0];
    Shape in = g.shape(x);
    Shape features{in[in.rank() - 1]};
    ValueId gamma = scale_ ? ctx.variable("gamma", features, {.kind = InitializerKind::ones}, {"out"}) : g.fill(features, 1.0);
    ValueId beta = center_ ? ctx.variable("beta", features, {.kind = InitializerKind::zeros}, {"out"}) : g.fill(features, 0.0);
    ValueId moving_mean = ctx.variable("moving_mean", features, {.kind = InitializerKind::zeros}, {"out"}, false);
    ValueId moving_variance = ctx.variable("moving_variance", features, {.kind = InitializerKind::ones}, {"out"}, false);
    ValueId mean = moving_mean, variance = moving_variance;
    if (ctx.training) {
      std::vector<int> axes(static_cast<std::size_t>(in.rank() - 1));
      for (std::size_t i = 0; i < axes.size(); ++i) axes[i] = static_cast<int>(i);
      mean = g.reduce(ReduceOp::mean, x, axes);
      ValueId centered = g.sub(x, mean);
      variance = g.reduce(ReduceOp::mean, g.mul(centered, centered), axes);
      g.moving_average(moving_mean, mean, momentum_);
      g.moving_average(moving_variance, variance, momentum_);
    }
    ValueId inv_std = g.unary(UnaryOp::rsqrt, g.add(variance, g.fill({}, epsilon_)));
    return g.add(g.mul(g.sub(x, mean), g.mul(inv_std, gamma)), beta);
  }
  TensorSplit tensor_split() const override { return TensorSplit::needs_whole("needs whole features"); }

 private:
  float momentum_, epsilon_;
  bool center_, scale_;
};

}  // namespace

std::unique_ptr<Layer> make_batch_normalization(ConfigNode args, const std::string& name) {
  args.expect_keys({"type", "name", "inputs", "momentum", "epsilon", "center", "scale", "axis"});
  if (args.get<int>("axis", -1) != -1) args["axis"].fail("BatchNormalization supports only axis -1 (channels last)");
  float momentum = args.get<float>("momentum", 0.99f);
  if (!(momentum >= 0 && momentum <= 1)) args["momentum"].fail("momentum must lie in [0, 1]");
  return std::make_unique<BatchNormalization>(name, momentum, args.get<float>("epsilon", 1e-3f),
                                              args.get<bool>("center", true), args.get<bool>("scale", true));
}

std::unique_ptr<Layer> make_layer_normalization(ConfigNode args, const std::string& name) {
  args.expect_keys({"type", "name", "inputs", "epsilon", "center", "scale", "axis"});
  if (args.get<int>("axis", -1) != -1)
    throw ConfigError(args["axis"].location() + ": " + args["axis"].path() +
                      ": LayerNormalization supports only axis -1 (the last axis)");
  return std::make_unique<LayerNormalization>(name, args.get<float>("epsilon", 1e-3f),
                                              args.get<bool>("center", true), args.get<bool>("scale", true));
}

}  // namespace tessera
