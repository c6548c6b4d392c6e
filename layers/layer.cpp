#include "layers/layer.hpp"

#include <algorithm>

#include "engine/config/config.hpp"

namespace tessera {
namespace {

const std::vector<std::string> kActivations = {"linear", "relu", "gelu", "gelu_tanh", "tanh",
                                               "sigmoid", "softmax", "log_softmax"};

}  // namespace

ValueId LayerContext::variable(const std::string& name, const Shape& shape, const Initializer& init,
                               std::vector<std::string> axis_roles, bool trainable) {
  std::string path = prefix_ + layer_ + "/" + name;
  std::uint64_t stream = store_.variables().size();  // creation order, as Keras seeds
  // Any block of it, drawn alone, as a device of a mesh draws its own.
  BlockInit init_block = [init, shape, seed = seed_, stream](const Tensor& block, std::span<const std::int64_t> start) {
    initialize_block(init, shape, start, block, seed, stream);
  };
  Variable& v = store_.get_or_create(path, shape, DType::f32, trainable, std::move(axis_roles), std::move(init_block));
  ValueId id = graph.variable(path, shape, v.dtype());
  traced_.emplace_back(path, id);
  if (const Regularizer* r = current_ != nullptr ? current_->regularizer(name) : nullptr) regularized_.emplace_back(id, *r);
  return id;
}

void LayerContext::enter_layer(const Layer& layer) {
  layer_ = layer.name();
  current_ = &layer;
}

std::uint64_t LayerContext::layer_seed(std::uint64_t site) const {
  std::uint64_t h = seed_ ^ 0x9E3779B97F4A7C15ull;  // FNV-style mix of the seed and the layer path
  for (char c : prefix_ + layer_) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001B3ull;
  if (site != 0) h = (h ^ site) * 0x100000001B3ull;  // a bijection: distinct sites, distinct seeds
  return h;
}

ValueId rows_at(Graph& g, ValueId x, ValueId rows) {
  const Shape s = g.shape(x);
  if (s.rank() < 2 || s[1] == 1) return x;
  if (g.dtype(x) != DType::f32)
    throw DTypeError("rows_at: " + std::string(dtype_name(g.dtype(x))) + " values " + s.str() + ", f32 expected");
  const std::int64_t b = s[0], t = s[1], rest = s.numel() / (b * t);
  const ValueId pick = g.one_hot(rows, t);  // [B, 1, T]
  const ValueId row = g.matmul(pick, g.reshape(x, {b, t, rest}), {}, DType::f32);  // [B, 1, rest]
  std::vector<std::int64_t> dims = s.dims();
  dims[1] = 1;
  return g.reshape(row, Shape(dims));
}

void check_activation(const ConfigNode& node, const std::string& activation) {
  if (std::find(kActivations.begin(), kActivations.end(), activation) != kActivations.end()) return;
  node.fail_unknown("activation", activation, kActivations);
}

ValueId apply_activation(Graph& g, ValueId x, const std::string& activation) {
  if (activation == "linear" || activation.empty()) return x;
  if (activation == "relu") return g.unary(UnaryOp::relu, x);
  if (activation == "gelu") return g.unary(UnaryOp::gelu_erf, x);
  if (activation == "gelu_tanh") return g.unary(UnaryOp::gelu_tanh, x);
  if (activation == "tanh") return g.unary(UnaryOp::tanh, x);
  if (activation == "sigmoid") return g.unary(UnaryOp::sigmoid, x);
  if (activation == "softmax") return g.softmax(x, -1, false);
  if (activation == "log_softmax") return g.softmax(x, -1, true);
  throw Error("unknown activation '" + activation + "'");  // config parsing checked it already
}

}  // namespace tessera
