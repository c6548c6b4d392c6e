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
#include "layers/regularizer.hpp"
#include "layers/tensor_split.hpp"

namespace tessera {

// A trace for incremental decoding (engine/run/kv_decoder.hpp). Every
// attention layer writes its keys and values [B, H, T, K] into its cache,
// two variables [B, H, context, K] of the store ("<layer>/<scope>kv_cache/
// batch_<B>/keys", ".../values", zeros at first), at each sequence's position
// (Graph::cache_write, in place).
// Prefill: the ordinary forward pass over a window of `window` tokens (at
// most the context), written at position 0.
// Decode: one new token per sequence ([B, 1] inputs) at its position, each
// attention layer attending over its cache's filled rows, the new key and value in.
struct KvTrace {
  bool decode = false;
  std::int64_t context = 0;
  // Prefill: the window's length when shorter than the model's input (0: the input's).
  std::int64_t window = 0;
  // Input: each sequence's position [B, 1] i32 (prefill: 0), where its new
  // rows go and up to which a decode step attends (Graph::cached_attention).
  ValueId positions = -1;
  // Prefill, when set: input [B, 1] i32, each sequence's last row of the
  // window, the only row whose output the caller reads. The model's last
  // attention layer then writes every row's keys and values but computes
  // its output at that row alone ([B, 1, ...]), and Model::trace gives the
  // layers after it only such rows, as llama.cpp does: the last block's
  // feed-forward and the head run once per sequence, not per prompt token.
  // Only where every layer after it is row_wise() (not a PositionEmbedding,
  // which would need the rows' positions, nor an Embedding of the tokens).
  ValueId last_rows = -1;
  bool in_last_attention = false;  // set by Model::trace while it traces that layer
  std::vector<std::string> caches;  // the cache variables' paths, in trace order
  bool causal = true;  // false once an attention layer that sees later positions was traced

  // Whether the layer being traced computes its output at last_rows only.
  bool last_rows_only() const { return !decode && last_rows >= 0 && in_last_attention; }
};

// x[b, rows[b], ...] of x [B, T, ...] (f32) as [B, 1, ...], rows [B, 1] i32:
// a one-hot row times x, in f32 whatever the run's precision, so exact
// (other rows count times 0). x itself when T is 1.
ValueId rows_at(Graph& graph, ValueId x, ValueId rows);

// What a layer sees while it is traced.
class LayerContext {
 public:
  LayerContext(Graph& graph, VariableStore& store, std::string prefix, bool training,
               std::uint64_t seed)
      : graph(graph), training(training), store_(store), prefix_(std::move(prefix)), seed_(seed) {}

  Graph& graph;
  bool training;
  KvTrace* kv = nullptr;  // set: an incremental-decoding trace (see KvTrace)
  // "<prefix><layer>/<name>", as variables are named.
  std::string path_of(const std::string& name) const { return prefix_ + layer_ + "/" + name; }

  // A graph leaf bound to the store's variable `<prefix><layer>/<name>`,
  // created and initialised on first use.
  ValueId variable(const std::string& name, const Shape& shape, const Initializer& init,
                   std::vector<std::string> axis_roles, bool trainable = true);
  // The output of sublayer `name` of this layer (a block's attention), by its
  // path "<layer path>/<name>/output": an activation a layout map can name.
  void nested_output(const std::string& name, ValueId value) { nested_.emplace_back(path_of(name + "/output"), value); }
  const std::vector<std::pair<std::string, ValueId>>& nested_outputs() const { return nested_; }
  // A seed for this layer's random ops (dropout), distinct per layer; a layer
  // with several random ops gives each its own `site`, so that their masks differ.
  std::uint64_t layer_seed(std::uint64_t site = 0) const;
  // The variables created in this trace: (path, graph value) pairs.
  const std::vector<std::pair<std::string, ValueId>>& traced_variables() const { return traced_; }
  // Those with a regularizer (Layer::set_regularizer), for the loss's penalty.
  const std::vector<std::pair<ValueId, Regularizer>>& regularized() const { return regularized_; }
  void enter_layer(const class Layer& layer);

 private:
  VariableStore& store_;
  std::string prefix_;
  std::string layer_;
  const class Layer* current_ = nullptr;
  std::uint64_t seed_;
  std::vector<std::pair<std::string, ValueId>> traced_;
  std::vector<std::pair<ValueId, Regularizer>> regularized_;
  std::vector<std::pair<std::string, ValueId>> nested_;
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
  // The sublayers whose outputs `call` reports (LayerContext::nested_output).
  virtual std::vector<std::string> nested_layers() const { return {}; }
  // Whether `call` mixes positions through attention (a KV cache when decoding).
  virtual bool attends() const { return false; }
  // Whether, in inference, each output row comes from the same row of the
  // inputs alone, alike at every position (Dense, LayerNormalization, Add):
  // a prefill may give such a layer only the rows it reads (KvTrace::last_rows).
  virtual bool row_wise() const { return false; }
  // A penalty on the layer's variable `variable` ("kernel"), added to the loss.
  void set_regularizer(const std::string& variable, Regularizer r) { regularizers_.emplace_back(variable, r); }
  const Regularizer* regularizer(const std::string& variable) const {
    for (const auto& [name, r] : regularizers_)
      if (name == variable) return &r;
    return nullptr;
  }

 private:
  std::string type_;
  std::string name_;
  std::vector<std::pair<std::string, Regularizer>> regularizers_;
};

// Keras activation names: linear, relu, gelu (erf), gelu_tanh, tanh, sigmoid,
// softmax, log_softmax. Throws ConfigError for others (with the list).
ValueId apply_activation(Graph& graph, ValueId x, const std::string& activation);
void check_activation(const class ConfigNode& node, const std::string& activation);

}  // namespace tessera
