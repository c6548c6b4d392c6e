// LayoutMap: variable paths to TensorLayouts, with Keras' lookup rules
// (keras.distribution.LayoutMap): an exact key match first; otherwise every
// key is a regular expression searched in the path (Python's re.search); two
// matching keys are an error naming both; no match means replicated.
//
//   LayoutMap map;
//   map.add("dense.*kernel", TensorLayout({std::nullopt, "model"}));
//   map.add("dense.*bias", TensorLayout({"model"}));
//   map.lookup("sequential/dense_1/kernel");   // [None, model]
#pragma once

#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "distribution/tensor_layout.hpp"

namespace tessera {

class LayoutMap {
 public:
  // Throws LayoutError for a duplicate key or a key that is not a valid regex.
  void add(const std::string& key, TensorLayout layout);
  // The layout for `path`, or nullopt (replicated); throws LayoutError when two
  // keys match by regex and neither matches exactly.
  std::optional<TensorLayout> lookup(const std::string& path) const;
  // The key that decided, with its layout (lookup() without the key).
  struct Match {
    std::string key;
    TensorLayout layout;
  };
  std::optional<Match> match(const std::string& path) const;
  std::vector<std::string> keys() const;  // in insertion order
  std::size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::string key;
    std::regex pattern;
    TensorLayout layout;
  };
  std::vector<Entry> entries_;
};

// A key whose regex matches exactly `path` (anchored, metacharacters escaped),
// for layout maps generated per variable (AutoTP, benchmarks).
std::string exact_key(const std::string& path);

}  // namespace tessera
