#include "layers/model.hpp"

#include <map>

#include "engine/config/config.hpp"
#include "layers/registry.hpp"

namespace tessera {
namespace {

[[noreturn]] void config_error(const ConfigNode& node, const std::string& what) {
  throw ConfigError(node.location() + ": " + node.path() + ": " + what);
}

// '/' separates the parts of variable paths: a Dense named "block/ffn_in"
// would silently share "block/ffn_in/kernel" with a TransformerBlock named
// "block", and the summary would count it twice. Keras rejects it too. `node`
// holds the name under `name:`.
void check_name(const ConfigNode& node, const std::string& name) {
  if (name.find('/') != std::string::npos)
    config_error(node["name"], "name '" + name + "' contains '/', which separates the parts of variable paths");
}

// A layer's error while it is traced, rethrown with where the layer is declared.
[[noreturn]] void layer_error(const std::string& where, const Layer& layer, const Error& e) {
  throw ConfigError(where + ": layer '" + layer.name() + "' (" + layer.type() + "): " + e.what());
}

ModelInput parse_input(ConfigNode node, int index) {
  node.expect_keys({"name", "shape", "dtype"});
  ModelInput in;
  in.name = node.get<std::string>("name", index == 0 ? "input" : "input_" + std::to_string(index));
  check_name(node, in.name);
  auto dims = node["shape"].as<std::vector<std::int64_t>>();
  for (auto d : dims)
    if (d < 1) config_error(node["shape"], "dimensions must be >= 1 (the batch axis is not part of it)");
  in.shape = Shape(dims);
  auto dtype = node.get<std::string>("dtype", "f32");
  try {
    in.dtype = parse_dtype(dtype);
  } catch (const DTypeError& e) {
    config_error(node["dtype"], e.what());
  }
  return in;
}

}  // namespace

Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

Model Model::from_config(ConfigNode node) {
  register_builtin_layers();
  node.expect_keys({"name", "inputs", "layers", "outputs", "layouts", "tokenizer"});
  Model model;
  ConfigNode inputs = node["inputs"];
  if (!inputs.is_sequence() || inputs.size() == 0)
    config_error(inputs, "expected a list of inputs like [{name: image, shape: [784]}]");
  for (std::size_t i = 0; i < inputs.size(); ++i) model.inputs_.push_back(parse_input(inputs.at(i), static_cast<int>(i)));

  ConfigNode layers = node["layers"];
  if (!layers.is_sequence() || layers.size() == 0) config_error(layers, "expected a non-empty list of layers");
  for (std::size_t i = 0; i < layers.size(); ++i)
    if (layers.at(i).has("inputs")) model.sequential_ = false;
  model.name_ = node.get<std::string>("name", model.sequential_ ? "sequential" : "functional");
  check_name(node, model.name_);
  model.tokenizer_ = node.find("tokenizer");
  if (auto layouts = node.find("layouts")) {
    if (!layouts->is_map()) config_error(*layouts, "expected a map of variable paths to layouts, like {mlp/dense/kernel: [null, model]}");
    for (const auto& path : layouts->keys()) model.layouts_.emplace_back(path, (*layouts)[path]);
  }

  // Names: model inputs first, then layers (explicit or auto-numbered per type).
  std::map<std::string, int> index;  // name -> source index (inputs negative)
  for (std::size_t i = 0; i < model.inputs_.size(); ++i) {
    if (index.count(model.inputs_[i].name)) config_error(inputs.at(i), "duplicate input name '" + model.inputs_[i].name + "'");
    index[model.inputs_[i].name] = -static_cast<int>(i) - 1;
  }
  std::map<std::string, int> type_counts;
  std::vector<std::unique_ptr<Layer>> built;
  std::vector<ConfigNode> specs;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    ConfigNode spec = layers.at(i);
    if (!spec.is_map()) config_error(spec, "expected a layer mapping like {type: Dense, units: 10}");
    auto type = spec["type"].as<std::string>();
    std::string name;
    if (spec.has("name")) {
      name = spec["name"].as<std::string>();
      check_name(spec, name);
    } else {
      std::string base = default_layer_name(type);
      int n = type_counts[base]++;
      name = n == 0 ? base : base + "_" + std::to_string(n);
      while (index.count(name)) name = base + "_" + std::to_string(++type_counts[base] - 1);
      spec.get<std::string>("name", name);
    }
    if (index.count(name)) config_error(spec, "duplicate layer name '" + name + "'");
    index[name] = static_cast<int>(i);
    built.push_back(LayerRegistry::instance().create(type, spec, name));
    specs.push_back(spec);
  }

  // Sources of each layer: its `inputs:` names, else the previous layer.
  std::vector<std::vector<int>> sources(built.size());
  std::vector<std::string> names;
  for (auto& [n, i] : index) names.push_back(n);
  for (std::size_t i = 0; i < built.size(); ++i) {
    if (auto list = specs[i].find("inputs")) {
      auto refs = list->is_sequence() ? list->as<std::vector<std::string>>()
                                      : std::vector<std::string>{list->as<std::string>()};
      for (const auto& ref : refs) {
        auto it = index.find(ref);
        if (it == index.end()) {
          std::string hint = did_you_mean(ref, names);
          config_error(*list, "layer '" + built[i]->name() + "' takes '" + ref +
                                  "', which is neither a layer nor a model input" +
                                  (hint.empty() ? "" : " (did you mean '" + hint + "'?)"));
        }
        if (it->second == static_cast<int>(i)) config_error(*list, "layer '" + built[i]->name() + "' takes itself as input");
        sources[i].push_back(it->second);
      }
    } else {
      sources[i].push_back(i == 0 ? -1 : static_cast<int>(i) - 1);
    }
    int arity = built[i]->arity();
    int count = static_cast<int>(sources[i].size());
    if ((arity > 0 && count != arity) || (arity < 0 && count < 2))
      config_error(specs[i], "layer '" + built[i]->name() + "' (" + built[i]->type() + ") takes " +
                                 (arity > 0 ? std::to_string(arity) : "two or more") + " input(s), got " +
                                 std::to_string(count));
  }

  // Topological order (Kahn); what remains is a cycle.
  std::vector<int> order, pending(built.size(), 0);
  for (std::size_t i = 0; i < built.size(); ++i)
    for (int s : sources[i]) pending[i] += s >= 0;
  std::vector<bool> done(built.size(), false);
  for (bool progress = true; progress;) {
    progress = false;
    for (std::size_t i = 0; i < built.size(); ++i) {
      if (done[i] || pending[i] != 0) continue;
      done[i] = true;
      progress = true;
      order.push_back(static_cast<int>(i));
      for (std::size_t j = 0; j < built.size(); ++j)
        for (int s : sources[j]) pending[j] -= s == static_cast<int>(i);
    }
  }
  if (order.size() != built.size()) {
    std::string cycle;
    for (std::size_t i = 0; i < built.size(); ++i)
      if (!done[i]) cycle += (cycle.empty() ? "" : ", ") + built[i]->name();
    config_error(layers, "the layer graph has a cycle through: " + cycle);
  }

  std::vector<int> position(built.size());
  for (std::size_t p = 0; p < order.size(); ++p) position[order[p]] = static_cast<int>(p);
  for (int i : order) {
    Node n{std::move(built[i]), {}, specs[i].location() + ": " + specs[i].path()};
    for (int s : sources[i]) n.sources.push_back(s < 0 ? s : position[s]);
    model.nodes_.push_back(std::move(n));
  }
  model.output_ = position[built.size() - 1];
  if (auto outputs = node.find("outputs")) {
    auto refs = outputs->is_sequence() ? outputs->as<std::vector<std::string>>()
                                       : std::vector<std::string>{outputs->as<std::string>()};
    if (refs.size() != 1) config_error(*outputs, "exactly one model output is supported, got " + std::to_string(refs.size()));
    auto it = index.find(refs[0]);
    if (it == index.end() || it->second < 0)
      config_error(*outputs, "output '" + refs[0] + "' is not a layer of the model");
    model.output_ = position[it->second];
  }
  return model;
}

Model::Traced Model::trace(Graph& graph, std::int64_t batch, bool training, VariableStore& store,
                           std::uint64_t seed, KvTrace* kv) const {
  Traced traced;
  for (const auto& in : inputs_) {
    auto dims = in.shape.dims();
    if (kv && kv->decode) dims = {1};
    else if (kv && kv->window > 0) dims = {kv->window};
    dims.insert(dims.begin(), batch);
    traced.inputs.push_back(graph.input(in.name, Shape(dims), in.dtype));
  }
  LayerContext ctx(graph, store, sequential_ ? name_ + "/" : "", training, seed);
  ctx.kv = kv;
  // A prefill that reads each sequence's last row only (KvTrace::last_rows):
  // the last attention layer computes that row, and the layers after it get
  // their inputs at that row, where they are all row-wise; else the whole
  // window runs through (the caller then reads the row it wants).
  std::size_t last_attention = nodes_.size();
  if (kv && !kv->decode && kv->last_rows >= 0)
    for (std::size_t i = 0; i < nodes_.size(); ++i)
      if (nodes_[i].layer->attends()) last_attention = i;
  for (std::size_t i = last_attention + 1; i < nodes_.size(); ++i)
    if (!nodes_[i].layer->row_wise()) last_attention = nodes_.size();
  const std::int64_t window = last_attention < nodes_.size() ? graph.shape(traced.inputs.at(0))[1] : 0;
  std::map<ValueId, ValueId> at_last_rows;
  auto last_rows_of = [&](ValueId v) {
    const Shape s = graph.shape(v);
    if (graph.dtype(v) != DType::f32 || s.rank() < 2 || s[1] != window) return v;
    auto [it, fresh] = at_last_rows.emplace(v, -1);
    if (fresh) it->second = rows_at(graph, v, kv->last_rows);
    return it->second;
  };
  std::vector<ValueId> outputs;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const Node& node = nodes_[i];
    std::vector<ValueId> args;
    for (int s : node.sources) args.push_back(s < 0 ? traced.inputs[static_cast<std::size_t>(-s - 1)] : outputs[static_cast<std::size_t>(s)]);
    if (last_attention < nodes_.size() && i > last_attention)
      for (ValueId& a : args) a = last_rows_of(a);
    if (kv) kv->in_last_attention = i == last_attention;
    ctx.enter_layer(*node.layer);
    // Errors about the inputs the layer gets (shapes, dtypes) point at its config.
    try {
      outputs.push_back(node.layer->call(ctx, args));
    } catch (const ShapeError& e) {
      layer_error(node.where, *node.layer, e);
    } catch (const DTypeError& e) {
      layer_error(node.where, *node.layer, e);
    } catch (const GraphError& e) {
      layer_error(node.where, *node.layer, e);
    } catch (const OutOfMemoryError& e) {  // a size from the config that no memory holds
      throw OutOfMemoryError(node.where + ": layer '" + node.layer->name() + "' (" + node.layer->type() + "): " +
                             e.what());
    }
    traced.layer_outputs.emplace_back(ctx.path_of("output"), outputs.back());
  }
  if (kv) kv->in_last_attention = false;
  traced.output = outputs[static_cast<std::size_t>(output_)];
  traced.variables = ctx.traced_variables();
  traced.regularized = ctx.regularized();
  traced.layer_outputs.insert(traced.layer_outputs.end(), ctx.nested_outputs().begin(), ctx.nested_outputs().end());
  return traced;
}

void Model::build(VariableStore& store, std::uint64_t seed) const {
  Graph scratch;
  trace(scratch, 1, false, store, seed);
}

std::string Model::summary(VariableStore& store, std::uint64_t seed) const {
  Graph graph;
  Traced t = trace(graph, 1, false, store, seed);
  std::string out = "Model: \"" + name_ + "\" (" + (sequential_ ? "Sequential" : "Functional") + ")\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-36s %-24s %12s\n", "Layer (type)", "Output Shape", "Param #");
  out += line;
  std::int64_t total = 0, trainable = 0;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const Layer& layer = *nodes_[i].layer;
    Shape s = graph.shape(t.layer_outputs[i].second);
    std::string shape = "(None";
    for (int a = 1; a < s.rank(); ++a) shape += ", " + std::to_string(s[a]);
    shape += ")";
    std::int64_t params = 0;
    std::string prefix = (sequential_ ? name_ + "/" : "") + layer.name() + "/";
    for (const auto& v : store.variables())
      if (v.path.rfind(prefix, 0) == 0) {
        params += v.shape().numel();
        if (v.trainable) trainable += v.shape().numel();
      }
    total += params;
    std::snprintf(line, sizeof line, "%-36s %-24s %12lld\n", (layer.name() + " (" + layer.type() + ")").c_str(),
                  shape.c_str(), static_cast<long long>(params));
    out += line;
  }
  // As Keras' summary: a BatchNormalization's moving statistics count, but are not trained.
  out += "Total params: " + std::to_string(total) + "\nTrainable params: " + std::to_string(trainable) +
         "\nNon-trainable params: " + std::to_string(total - trainable) + "\n";
  return out;
}

std::vector<Model::LayerNode> Model::layer_graph() const {
  std::vector<LayerNode> graph;
  for (const auto& node : nodes_)
    graph.push_back({node.layer->type(), node.layer->name(), (sequential_ ? name_ + "/" : "") + node.layer->name() + "/",
                     node.sources, node.layer->tensor_split()});
  return graph;
}

std::vector<std::string> Model::output_paths() const {
  std::vector<std::string> paths;
  for (const auto& node : layer_graph()) paths.push_back(node.prefix + "output");
  for (const auto& node : nodes_)
    for (const auto& nested : node.layer->nested_layers())
      paths.push_back((sequential_ ? name_ + "/" : "") + node.layer->name() + "/" + nested + "/output");
  return paths;
}

}  // namespace tessera
