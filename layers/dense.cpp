// Dense: y = activation(x @ kernel + bias) over the last axis of x.
#include "engine/config/config.hpp"
#include "layers/catalog.hpp"

namespace tessera {
namespace {

class Dense final : public Layer {
 public:
  Dense(const std::string& name, std::int64_t units, std::string activation, bool use_bias,
        Initializer kernel_init, Initializer bias_init)
      : Layer("Dense", name), units_(units), activation_(std::move(activation)),
        use_bias_(use_bias), kernel_init_(kernel_init), bias_init_(bias_init) {}

  bool row_wise() const override { return true; }
  ValueId call(LayerContext& ctx, const std::vector<ValueId>& inputs) override {
    Graph& g = ctx.graph;
    Shape in = g.shape(inputs[0]);
    if (in.rank() < 2)
      throw ShapeError("input must be [batch, ..., features], got " + in.str());
    ValueId kernel = ctx.variable("kernel", {in[in.rank() - 1], units_}, kernel_init_, {"in", "out"});
    ValueId y = g.matmul(inputs[0], kernel);
    if (use_bias_) y = g.add(y, ctx.variable("bias", {units_}, bias_init_, {"out"}));
    return apply_activation(g, y, activation_);
  }
  TensorSplit tensor_split() const override {
    return {TensorSplit::Kind::linear, {{{{"kernel", "out"}, {"bias", "out"}}, "", "units"}, {{{"kernel", "in"}}, "", ""}}};
  }

 private:
  std::int64_t units_;
  std::string activation_;
  bool use_bias_;
  Initializer kernel_init_, bias_init_;
};

}  // namespace

std::unique_ptr<Layer> make_dense(ConfigNode args, const std::string& name) {
  args.expect_keys({"type", "name", "inputs", "units", "activation", "use_bias",
                    "kernel_initializer", "bias_initializer", "kernel_regularizer", "bias_regularizer"});
  auto units = args["units"].as<std::int64_t>();
  if (units < 1) throw ConfigError(args["units"].location() + ": " + args["units"].path() + ": units must be >= 1");
  auto activation = args.get<std::string>("activation", "linear");
  check_activation(args["activation"], activation);
  bool use_bias = args.get<bool>("use_bias", true);
  auto layer = std::make_unique<Dense>(name, units, activation, use_bias,
                                       initializer_arg(args, "kernel_initializer", "glorot_uniform"),
                                       initializer_arg(args, "bias_initializer", "zeros"));
  if (!use_bias && args.has("bias_regularizer")) args["bias_regularizer"].fail("the layer has no bias (use_bias: false)");
  read_regularizers(args, *layer);
  return layer;
}

}  // namespace tessera
