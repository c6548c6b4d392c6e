// Layers that merge several inputs.
#include "engine/config/config.hpp"
#include "layers/catalog.hpp"

namespace tessera {
namespace {

// Add: the elementwise sum of two or more inputs of one shape.
class Add final : public Layer {
 public:
  explicit Add(const std::string& name) : Layer("Add", name) {}
  int arity() const override { return -1; }
  bool row_wise() const override { return true; }
  ValueId call(LayerContext& ctx, const std::vector<ValueId>& inputs) override {
    ValueId sum = inputs[0];
    for (std::size_t i = 1; i < inputs.size(); ++i) {
      if (ctx.graph.shape(inputs[i]) != ctx.graph.shape(inputs[0]))
        throw ShapeError("inputs have shapes " + ctx.graph.shape(inputs[0]).str() + " and " +
                         ctx.graph.shape(inputs[i]).str());
      sum = ctx.graph.add(sum, inputs[i]);
    }
    return sum;
  }
  TensorSplit tensor_split() const override { return TensorSplit::keeps_split(); }
};

// Concatenate(axis=-1): joins two or more inputs along an axis.
class Concatenate final : public Layer {
 public:
  Concatenate(const std::string& name, int axis) : Layer("Concatenate", name), axis_(axis) {}
  int arity() const override { return -1; }
  ValueId call(LayerContext& ctx, const std::vector<ValueId>& inputs) override {
    // A negative axis counts from the end, so only the input rank tells whether
    // it names the batch axis.
    Shape first = ctx.graph.shape(inputs[0]);
    int axis = axis_ < 0 ? axis_ + first.rank() : axis_;
    if (axis < 1 || axis >= first.rank())
      throw ShapeError("axis " + std::to_string(axis_) + " is " + (axis == 0 ? "the batch axis" : "out of range") +
                       " of inputs " + first.str() + "; concatenate along a feature axis, 1 to " +
                       std::to_string(first.rank() - 1) + " (or -1 to -" + std::to_string(first.rank() - 1) + ")");
    return ctx.graph.concat(inputs, axis);
  }
  TensorSplit tensor_split() const override { return TensorSplit::needs_whole("needs whole features"); }

 private:
  int axis_;
};

}  // namespace

std::unique_ptr<Layer> make_concatenate(ConfigNode args, const std::string& name) {
  args.expect_keys({"type", "name", "inputs", "axis"});
  int axis = args.get<int>("axis", -1);
  if (axis == 0) args["axis"].fail("axis 0 is the batch axis; concatenate along a feature axis");
  return std::make_unique<Concatenate>(name, axis);
}

std::unique_ptr<Layer> make_add(ConfigNode args, const std::string& name) {
  args.expect_keys({"type", "name", "inputs"});
  return std::make_unique<Add>(name);
}

}  // namespace tessera
