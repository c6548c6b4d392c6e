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

 private:
  float epsilon_;
  bool center_, scale_;
};

}  // namespace

std::unique_ptr<Layer> make_layer_normalization(ConfigNode args, const std::string& name) {
  args.expect_keys({"type", "name", "inputs", "epsilon", "center", "scale", "axis"});
  if (args.get<int>("axis", -1) != -1)
    throw ConfigError(args["axis"].location() + ": " + args["axis"].path() +
                      ": LayerNormalization supports only axis -1 (the last axis)");
  return std::make_unique<LayerNormalization>(name, args.get<float>("epsilon", 1e-3f),
                                              args.get<bool>("center", true), args.get<bool>("scale", true));
}

}  // namespace tessera
