// Model: the layer graph declared under `model:` in a config.
//
//   model:
//     name: fashion_mlp
//     inputs: [{name: image, shape: [784]}]          # per sample, no batch axis
//     layers:                                        # Sequential: each takes the previous
//       - {type: Dense, units: 1024, activation: relu}
//       - {type: Dense, units: 10}
//
// A layer with `inputs: [a, b]` names the layers (or model inputs) it takes,
// which makes the model Functional (a DAG); `outputs: [name]` picks the
// model's output (default: the last layer). Layer names auto-number per type
// as Keras does (dense, dense_1, ...). Variable paths are
// "<model name>/<layer>/<variable>" in a Sequential model and
// "<layer>/<variable>" in a Functional one, as in Keras.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/config/config.hpp"
#include "engine/graph/graph.hpp"
#include "engine/variable_store.hpp"
#include "layers/layer.hpp"

namespace tessera {

class ConfigNode;

struct ModelInput {
  std::string name;
  Shape shape;  // per sample
  DType dtype = DType::f32;
};

class Model {
 public:
  // Parses and validates `model:`; throws ConfigError with file:line:column for
  // unknown keys or layer types, bad arguments, unknown or cyclic layer inputs.
  static Model from_config(ConfigNode node);
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ~Model();

  struct Traced {
    std::vector<ValueId> inputs;  // one per ModelInput, with a batch axis
    ValueId output = -1;
    std::vector<std::pair<std::string, ValueId>> variables;  // path -> graph leaf
    // Every layer's output by its path, in layer order ("<layer path>/output",
    // as output_paths() lists them), then the sublayers' ("block_0/attention/output").
    std::vector<std::pair<std::string, ValueId>> layer_outputs;
    // Variables with a kernel_/bias_regularizer: the loss adds their penalty.
    std::vector<std::pair<ValueId, Regularizer>> regularized;
  };
  // Adds the forward pass for `batch` samples to `graph`, creating (and
  // initialising from `seed`) any variable the store lacks. A layer that
  // cannot take its inputs (shapes, dtypes) throws ConfigError with its
  // file:line:column, YAML path and name.
  // With `kv`, an incremental-decoding trace (layers/layer.hpp's KvTrace):
  // when it decodes, each input holds one token per sequence ([batch, 1]);
  // a prefill of a shorter window, that many ([batch, window]).
  Traced trace(Graph& graph, std::int64_t batch, bool training, VariableStore& store,
               std::uint64_t seed, KvTrace* kv = nullptr) const;

  const std::string& name() const { return name_; }
  bool sequential() const { return sequential_; }
  const std::vector<ModelInput>& inputs() const { return inputs_; }
  // The layer graph, for analyses such as automatic tensor parallelism: per
  // layer in topological order, its type, its path prefix ("mlp/dense_1/",
  // the prefix of its variables) and the layers it reads (index; -1 - i for
  // model input i).
  struct LayerNode {
    std::string type, name, prefix;
    std::vector<int> sources;
    TensorSplit split;  // how its variables split (the layer's declaration)
  };
  std::vector<LayerNode> layer_graph() const;
  // Keras' "<layer path>/output" of every layer ("sequential/dense_1/output"),
  // in layer order, then those of the sublayers layers report
  // ("block_0/attention/output"): the paths a layout map can give activation
  // layouts by.
  std::vector<std::string> output_paths() const;
  // Creates (and initialises) every variable in `store`, as Keras' build().
  void build(VariableStore& store, std::uint64_t seed) const;
  // Keras-style summary: layer (type), output shape, parameters; then totals.
  std::string summary(VariableStore& store, std::uint64_t seed) const;

  // `layouts:` of the model: variable path -> its own layout, as written
  // ([null, model]); make_trainer reads them against the mesh, ahead of the
  // distribution's layout map (Keras: a variable's _layout first).
  const std::vector<std::pair<std::string, ConfigNode>>& declared_layouts() const { return layouts_; }
  // `tokenizer:` of the model (engine/run/tokenizer.hpp reads it), or null.
  const ConfigNode* declared_tokenizer() const { return tokenizer_ ? &*tokenizer_ : nullptr; }

 private:
  Model() = default;
  struct Node {
    std::unique_ptr<Layer> layer;
    std::vector<int> sources;  // indices: < 0 is model input -(i+1), else a node
    std::string where;         // "model.yaml:5:7: model.layers[1]", for errors of trace
  };
  std::string name_;
  bool sequential_ = true;
  std::vector<ModelInput> inputs_;
  std::vector<Node> nodes_;  // topologically ordered
  std::vector<std::pair<std::string, ConfigNode>> layouts_;
  std::optional<ConfigNode> tokenizer_;
  int output_ = -1;
};

}  // namespace tessera
