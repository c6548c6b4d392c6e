// The layer registry: YAML `type:` names to factories.
//
// register_builtin_layers() is called explicitly at engine start (static
// initialisers would be dropped from a static library). Registering a type
// twice is an error; an unknown type lists every known one with a did-you-mean.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "layers/layer.hpp"

namespace tessera {

class ConfigNode;

// Builds a layer from its YAML mapping (`type` and `name` already read).
using LayerFactory = std::function<std::unique_ptr<Layer>(ConfigNode args, const std::string& name)>;

class LayerRegistry {
 public:
  static LayerRegistry& instance();
  void add(const std::string& type, LayerFactory factory);
  std::unique_ptr<Layer> create(const std::string& type, const ConfigNode& args,
                                const std::string& name) const;
  bool contains(const std::string& type) const;
  std::vector<std::string> types() const;

 private:
  std::vector<std::pair<std::string, LayerFactory>> factories_;
};

// Registers the catalog of layers/; safe to call more than once.
void register_builtin_layers();

// Keras' default layer name of a type: "Dense" -> "dense", "Conv2D" -> "conv2d",
// "MaxPooling2D" -> "max_pooling2d".
std::string default_layer_name(const std::string& type);

}  // namespace tessera
