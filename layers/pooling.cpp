// 2-D pooling over channels-last images.
#include "engine/config/config.hpp"
#include "layers/catalog.hpp"

namespace tessera {

namespace {

class Pooling2D final : public Layer {
 public:
  Pooling2D(const std::string& type, const std::string& name, PoolKind kind, int ph, int pw, int sh,
            int sw, bool same)
      : Layer(type, name), kind_(kind), ph_(ph), pw_(pw), sh_(sh), sw_(sw), same_(same) {}

  ValueId call(LayerContext& ctx, const std::vector<ValueId>& inputs) override {
    Shape in = ctx.graph.shape(inputs[0]);
    if (in.rank() != 4)
      throw ShapeError("input must be [batch, height, width, channels], got " + in.str());
    Pool2dArgs args{.kind = kind_, .window_h = ph_, .window_w = pw_, .stride_h = sh_, .stride_w = sw_};
    if (same_) {
      same_padding(in[1], ph_, sh_, args.pad_top, args.pad_bottom);
      same_padding(in[2], pw_, sw_, args.pad_left, args.pad_right);
    }
    return ctx.graph.pool2d(inputs[0], args);
  }
  TensorSplit tensor_split() const override { return TensorSplit::keeps_split(); }

 private:
  PoolKind kind_;
  int ph_, pw_, sh_, sw_;
  bool same_;
};

// The mean over height and width: [N, H, W, C] -> [N, C].
class GlobalAveragePooling2D final : public Layer {
 public:
  explicit GlobalAveragePooling2D(const std::string& name) : Layer("GlobalAveragePooling2D", name) {}
  ValueId call(LayerContext& ctx, const std::vector<ValueId>& inputs) override {
    Shape in = ctx.graph.shape(inputs[0]);
    if (in.rank() != 4)
      throw ShapeError("input must be [batch, height, width, channels], got " + in.str());
    return ctx.graph.reduce(ReduceOp::mean, inputs[0], {1, 2});
  }
  TensorSplit tensor_split() const override { return TensorSplit::keeps_split(); }
};

std::unique_ptr<Layer> make_pooling(ConfigNode& args, const std::string& type, const std::string& name,
                                    PoolKind kind) {
  args.expect_keys({"type", "name", "inputs", "pool_size", "strides", "padding"});
  int ph, pw, sh, sw;
  parse_pair(args, "pool_size", 2, ph, pw);
  if (args.has("strides") && !args["strides"].is_null()) {
    parse_pair(args["strides"], sh, sw);
  } else {
    sh = ph;  // Keras: strides default to pool_size
    sw = pw;
  }
  bool same = parse_padding(args);
  return std::make_unique<Pooling2D>(type, name, kind, ph, pw, sh, sw, same);
}

}  // namespace

std::unique_ptr<Layer> make_max_pooling2d(ConfigNode args, const std::string& name) {
  return make_pooling(args, "MaxPooling2D", name, PoolKind::max);
}

std::unique_ptr<Layer> make_average_pooling2d(ConfigNode args, const std::string& name) {
  return make_pooling(args, "AveragePooling2D", name, PoolKind::avg);
}

std::unique_ptr<Layer> make_global_average_pooling2d(ConfigNode args, const std::string& name) {
  args.expect_keys({"type", "name", "inputs"});
  return std::make_unique<GlobalAveragePooling2D>(name);
}

}  // namespace tessera
