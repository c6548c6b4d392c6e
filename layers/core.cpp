// Layers without variables that change shape or apply a function.
#include <algorithm>

#include "engine/config/config.hpp"
#include "layers/catalog.hpp"

namespace tessera {
namespace {

class ActivationLayer final : public Layer {
 public:
  ActivationLayer(const std::string& name, std::string activation)
      : Layer("Activation", name), activation_(std::move(activation)) {}
  bool row_wise() const override { return true; }
  ValueId call(LayerContext& ctx, const std::vector<ValueId>& in) override {
    return apply_activation(ctx.graph, in[0], activation_);
  }
  TensorSplit tensor_split() const override { return TensorSplit::keeps_split(); }

 private:
  std::string activation_;
};

// Flatten keeps the batch axis and joins the rest.
class Flatten final : public Layer {
 public:
  explicit Flatten(const std::string& name) : Layer("Flatten", name) {}
  ValueId call(LayerContext& ctx, const std::vector<ValueId>& in) override {
    Shape s = ctx.graph.shape(in[0]);
    return ctx.graph.reshape(in[0], {s[0], s.numel() / std::max<std::int64_t>(1, s[0])});
  }
  TensorSplit tensor_split() const override { return TensorSplit::needs_whole("needs whole features"); }
};

// Reshape(target_shape) reshapes all but the batch axis; one entry may be -1.
class Reshape final : public Layer {
 public:
  Reshape(const std::string& name, std::vector<std::int64_t> target)
      : Layer("Reshape", name), target_(std::move(target)) {}
  ValueId call(LayerContext& ctx, const std::vector<ValueId>& in) override {
    Shape s = ctx.graph.shape(in[0]);
    std::int64_t per_sample = s.numel() / std::max<std::int64_t>(1, s[0]), known = 1;
    int unknown = -1;
    for (std::size_t i = 0; i < target_.size(); ++i) {
      if (target_[i] == -1) unknown = static_cast<int>(i);
      else known *= target_[i];
    }
    std::vector<std::int64_t> dims{s[0]};
    for (auto d : target_) dims.push_back(d == -1 ? per_sample / std::max<std::int64_t>(1, known) : d);
    if ((unknown >= 0 && per_sample % known != 0) || Shape(dims).numel() != s.numel())
      throw ShapeError("cannot reshape input " + s.str() + " to target_shape with " + std::to_string(per_sample) +
                       " elements per sample");
    return ctx.graph.reshape(in[0], Shape(dims));
  }
  TensorSplit tensor_split() const override { return TensorSplit::needs_whole("needs whole features"); }

 private:
  std::vector<std::int64_t> target_;
};

// Inverted dropout: zero a `rate` fraction in training, scale the rest. The
// `seed` argument picks another mask stream of the layer (0, the default, is
// the layer's own).
class Dropout final : public Layer {
 public:
  Dropout(const std::string& name, float rate, std::uint64_t seed)
      : Layer("Dropout", name), rate_(rate), seed_(seed) {}
  bool row_wise() const override { return true; }
  ValueId call(LayerContext& ctx, const std::vector<ValueId>& in) override {
    return ctx.training ? ctx.graph.dropout(in[0], rate_, ctx.layer_seed(seed_)) : in[0];
  }
  TensorSplit tensor_split() const override { return TensorSplit::needs_whole("draws its mask over whole rows"); }

 private:
  float rate_;
  std::uint64_t seed_;
};

}  // namespace

std::unique_ptr<Layer> make_dropout(ConfigNode args, const std::string& name) {
  args.expect_keys({"type", "name", "inputs", "rate", "seed"});
  auto rate = args["rate"].as<float>();
  if (!(rate >= 0 && rate < 1)) throw ConfigError(args["rate"].location() + ": " + args["rate"].path() + ": rate must lie in [0, 1)");
  auto seed = args.get<std::int64_t>("seed", 0);
  if (seed < 0) args["seed"].fail("seed must be >= 0");
  return std::make_unique<Dropout>(name, rate, static_cast<std::uint64_t>(seed));
}

std::unique_ptr<Layer> make_activation(ConfigNode args, const std::string& name) {
  args.expect_keys({"type", "name", "inputs", "activation"});
  auto activation = args["activation"].as<std::string>();
  check_activation(args["activation"], activation);
  return std::make_unique<ActivationLayer>(name, activation);
}

std::unique_ptr<Layer> make_flatten(ConfigNode args, const std::string& name) {
  args.expect_keys({"type", "name", "inputs"});
  return std::make_unique<Flatten>(name);
}

std::unique_ptr<Layer> make_reshape(ConfigNode args, const std::string& name) {
  args.expect_keys({"type", "name", "inputs", "target_shape"});
  auto target = args["target_shape"].as<std::vector<std::int64_t>>();
  if (std::count(target.begin(), target.end(), -1) > 1 ||
      std::any_of(target.begin(), target.end(), [](auto d) { return d < -1 || d == 0; }))
    throw ConfigError(args["target_shape"].location() + ": " + args["target_shape"].path() +
                      ": dimensions must be positive, with at most one -1");
  return std::make_unique<Reshape>(name, target);
}

void parse_pair(const ConfigNode& node, int& first, int& second) {
  if (node.is_sequence()) {
    auto v = node.as<std::vector<int>>();
    if (v.size() != 2)
      throw ConfigError(node.location() + ": " + node.path() + ": expected an integer or a pair [h, w], got " +
                        std::to_string(v.size()) + " values");
    first = v[0];
    second = v[1];
  } else {
    first = second = node.as<int>();
  }
  if (first < 1 || second < 1)
    throw ConfigError(node.location() + ": " + node.path() + ": values must be >= 1");
}

void parse_pair(const ConfigNode& args, const std::string& key, int default_value, int& first, int& second) {
  if (!args.has(key)) args.get<int>(key, default_value);  // writes the default for the dump
  parse_pair(args[key], first, second);
}

}  // namespace tessera
