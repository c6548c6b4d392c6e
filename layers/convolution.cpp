// Conv2D over channels-last images: y = activation(conv(x, kernel) + bias).
#include "engine/config/config.hpp"
#include "layers/catalog.hpp"

namespace tessera {
namespace {

class Conv2D final : public Layer {
 public:
  Conv2D(const std::string& name, std::int64_t filters, int kh, int kw, int sh, int sw, bool same,
         std::string activation, bool use_bias, Initializer kernel_init, Initializer bias_init)
      : Layer("Conv2D", name), filters_(filters), kh_(kh), kw_(kw), sh_(sh), sw_(sw), same_(same),
        activation_(std::move(activation)), use_bias_(use_bias), kernel_init_(kernel_init),
        bias_init_(bias_init) {}

  ValueId call(LayerContext& ctx, const std::vector<ValueId>& inputs) override {
    Graph& g = ctx.graph;
    Shape in = g.shape(inputs[0]);
    if (in.rank() != 4)
      throw ShapeError("input must be [batch, height, width, channels], got " + in.str());
    Conv2dArgs args{.stride_h = sh_, .stride_w = sw_};
    if (same_) {
      same_padding(in[1], kh_, sh_, args.pad_top, args.pad_bottom);
      same_padding(in[2], kw_, sw_, args.pad_left, args.pad_right);
    }
    ValueId kernel = ctx.variable("kernel", {kh_, kw_, in[3], filters_}, kernel_init_, {"", "", "in", "out"});
    ValueId y = g.conv2d(inputs[0], kernel, args);
    if (use_bias_) y = g.add(y, ctx.variable("bias", {filters_}, bias_init_, {"out"}));
    return apply_activation(g, y, activation_);
  }
  TensorSplit tensor_split() const override { return {TensorSplit::Kind::linear, {{{{"kernel", "out"}, {"bias", "out"}}, "", "filters"}, {{{"kernel", "in"}}, "", ""}}}; }

 private:
  std::int64_t filters_;
  int kh_, kw_, sh_, sw_;
  bool same_;
  std::string activation_;
  bool use_bias_;
  Initializer kernel_init_, bias_init_;
};

}  // namespace

bool parse_padding(ConfigNode& args) {
  auto padding = args.get<std::string>("padding", "valid");
  if (padding != "valid" && padding != "same")
    throw ConfigError(args["padding"].location() + ": " + args["padding"].path() +
                      ": padding must be 'valid' or 'same', got '" + padding + "'");
  return padding == "same";
}

std::unique_ptr<Layer> make_conv2d(ConfigNode args, const std::string& name) {
  args.expect_keys({"type", "name", "inputs", "filters", "kernel_size", "strides", "padding",
                    "activation", "use_bias", "kernel_initializer", "bias_initializer", "kernel_regularizer",
                    "bias_regularizer"});
  auto filters = args["filters"].as<std::int64_t>();
  if (filters < 1) throw ConfigError(args["filters"].location() + ": " + args["filters"].path() + ": filters must be >= 1");
  int kh, kw, sh, sw;
  parse_pair(args["kernel_size"], kh, kw);
  parse_pair(args, "strides", 1, sh, sw);
  bool same = parse_padding(args);
  auto activation = args.get<std::string>("activation", "linear");
  check_activation(args["activation"], activation);
  bool use_bias = args.get<bool>("use_bias", true);
  auto layer = std::make_unique<Conv2D>(name, filters, kh, kw, sh, sw, same, activation, use_bias,
                                        initializer_arg(args, "kernel_initializer", "glorot_uniform"),
                                        initializer_arg(args, "bias_initializer", "zeros"));
  if (!use_bias && args.has("bias_regularizer")) args["bias_regularizer"].fail("the layer has no bias (use_bias: false)");
  read_regularizers(args, *layer);
  return layer;
}

}  // namespace tessera
