#include "distribution/layout_map.hpp"

#include "engine/core/error.hpp"

namespace tessera {

void LayoutMap::add(const std::string& key, TensorLayout layout) {
  for (const auto& e : entries_)
    if (e.key == key) throw LayoutError("layout map: key '" + key + "' is given twice");
  try {
    entries_.push_back(Entry{key, std::regex(key, std::regex::ECMAScript), std::move(layout)});
  } catch (const std::regex_error& e) {
    throw LayoutError("layout map: key '" + key + "' is not a valid regular expression: " + e.what());
  }
}

std::optional<TensorLayout> LayoutMap::lookup(const std::string& path) const {
  auto found = match(path);
  if (!found) return std::nullopt;
  return found->layout;
}

std::optional<LayoutMap::Match> LayoutMap::match(const std::string& path) const {
  for (const auto& e : entries_)
    if (e.key == path) return Match{e.key, e.layout};
  const Entry* found = nullptr;
  for (const auto& e : entries_) {
    if (!std::regex_search(path, e.pattern)) continue;
    if (found != nullptr)
      throw LayoutError("layout map: variable '" + path + "' matches two keys, '" + found->key + "' and '" +
                        e.key + "'; make one of them more specific");
    found = &e;
  }
  if (found == nullptr) return std::nullopt;
  return Match{found->key, found->layout};
}

std::vector<std::string> LayoutMap::keys() const {
  std::vector<std::string> keys;
  for (const auto& e : entries_) keys.push_back(e.key);
  return keys;
}

std::string exact_key(const std::string& path) {
  std::string key = "^";
  for (char c : path) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) key += '\\';
    key += c;
  }
  return key + "$";
}

}  // namespace tessera
