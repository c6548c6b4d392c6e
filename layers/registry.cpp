#include "layers/registry.hpp"

#include <algorithm>
#include <cctype>
#include <mutex>

#include "engine/config/config.hpp"
#include "layers/catalog.hpp"

namespace tessera {

LayerRegistry& LayerRegistry::instance() {
  static LayerRegistry registry;
  return registry;
}

void LayerRegistry::add(const std::string& type, LayerFactory factory) {
  if (contains(type)) throw Error("layer type '" + type + "' is registered twice");
  factories_.emplace_back(type, std::move(factory));
}

bool LayerRegistry::contains(const std::string& type) const {
  return std::any_of(factories_.begin(), factories_.end(), [&](auto& f) { return f.first == type; });
}

std::vector<std::string> LayerRegistry::types() const {
  std::vector<std::string> out;
  for (auto& f : factories_) out.push_back(f.first);
  return out;
}

std::unique_ptr<Layer> LayerRegistry::create(const std::string& type, const ConfigNode& args,
                                             const std::string& name) const {
  for (auto& [known, factory] : factories_)
    if (known == type) return factory(args, name);
  args.fail_unknown("layer type", type, types());
}

void register_builtin_layers() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto& r = LayerRegistry::instance();
    r.add("Dense", make_dense);
    r.add("Activation", make_activation);
    r.add("Flatten", make_flatten);
    r.add("Reshape", make_reshape);
    r.add("Conv2D", make_conv2d);
    r.add("MaxPooling2D", make_max_pooling2d);
    r.add("AveragePooling2D", make_average_pooling2d);
    r.add("GlobalAveragePooling2D", make_global_average_pooling2d);
    r.add("LayerNormalization", make_layer_normalization);
    r.add("BatchNormalization", make_batch_normalization);
    r.add("Embedding", make_embedding);
    r.add("PositionEmbedding", make_position_embedding);
    r.add("Dropout", make_dropout);
    r.add("MultiHeadAttention", make_multi_head_attention);
    r.add("TransformerBlock", make_transformer_block);
    r.add("Add", make_add);
    r.add("Concatenate", make_concatenate);
  });
}

std::string default_layer_name(const std::string& type) {
  // As Keras' to_snake_case: an underscore before a capital that follows a
  // lower-case letter; digits stay attached ("Conv2D" -> "conv2d").
  std::string out;
  for (std::size_t i = 0; i < type.size(); ++i) {
    char c = type[i];
    bool upper = std::isupper(static_cast<unsigned char>(c)) != 0;
    if (upper && i > 0 && std::islower(static_cast<unsigned char>(type[i - 1]))) out += '_';
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

}  // namespace tessera
