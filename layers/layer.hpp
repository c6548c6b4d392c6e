// Layer: one entry of the layer catalog (Keras names and arguments).
//
// A layer adds its primitive ops to a graph when the model is traced
// (`call`), creating its variables through the context on the way. Its
// arguments are parsed once, when the model is built from YAML, by the
// factory registered for its type (layers/registry.hpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/graph/graph.hpp"
#include "engine/variable_store.hpp"
#include "layers/initializer.hpp"
#include "layers/tensor_split.hpp"

namespace tessera {

// What a layer sees while it is traced.
class LayerContext {
 public:
  LayerContext(Graph& graph, VariableStore& store, std::string prefix, bool training,
               std::uint64_t seed)
      : graph(graph), training(training), store_(store), prefix_(std::move(prefix)), seed_(seed) {}

  Graph& graph;
  bool training;

  // A graph leaf bound to the store's variable `<prefix><layer>/<name>`,
  // created and initialised on first use.
  ValueId variable(const std::string& name, const Shape& shape, const Initializer& init,
                   std::vector<std::string> axis_roles, bool trainable = true);
  // A graph input fed with a fixed host tensor (a causal mask); the caller of
  // trace binds the tensors listed by constants().
  ValueId constant(const std::string& name, const Tensor& value);
  const std::vector<std::pair<ValueId, Tensor>>& constants() const { return constants_; }
  // A seed for this layer's random ops (dropout), distinct per layer; a layer
  // with several random ops gives each its own `site`, so that their masks differ.
  std::uint64_t layer_seed(std::uint64_t site = 0) const;
  // The variables created in this trace: (path, graph value) pairs.
  const std::vector<std::pair<std::string, ValueId>>& traced_variables() const { return traced_; }
  void enter_layer(const std::string& name) { layer_ = name; }

 private:
  VariableStore& store_;
  std::string prefix_;
  std::string layer_;
  std::uint64_t seed_;
  std::vector<std::pair<std::string, ValueId>> traced_;
  std::vector<std::pair<ValueId, Tensor>> constants_;
};

class Layer {
 public:
  Layer(std::string type, std::string name) : type_(std::move(type)), name_(std::move(name)) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const std::string& type() const { return type_; }  // "Dense"
  const std::string& name() const { return name_; }  // "dense_1"
  // Inputs the layer takes: 1 for most, -1 for any number >= 2 (Add).
  virtual int arity() const { return 1; }
  // Appends the layer's ops for `inputs` (batch axis first); returns its output.
  // Its ShapeError or DTypeError need not name the layer: Model::trace adds
  // the layer's name and where the config declares it.
  virtual ValueId call(LayerContext& ctx, const std::vector<ValueId>& inputs) = 0;
  // How its variables split for tensor parallelism (AutoTP reads this).
  virtual TensorSplit tensor_split() const { return {}; }

 private:
  std::string type_;
  std::string name_;
};

// Keras activation names: linear, relu, gelu (erf), gelu_tanh, tanh, sigmoid,
// softmax, log_softmax. Throws ConfigError for others (with the list).
ValueId apply_activation(Graph& graph, ValueId x, const std::string& activation);
void check_activation(const class ConfigNode& node, const std::string& activation);

}  // namespace tessera
