// LayoutMap: variable paths to TensorLayouts, with Keras' lookup rules
// (keras.distribution.LayoutMap): an exact key match first; otherwise every
// key is a regular expression matched against the path; two matching keys
// are an error naming both; no match means replicated. How a key matches
// changed in Keras 3.14 ("Refactors LayoutMap to use strict regex matching",
// February 2026): up to 3.13, and in the distribution guide, a key is
// searched anywhere in the path (re.search, KeyMatch::search, the default);
// from 3.14 it must match the whole path (re.fullmatch, KeyMatch::fullmatch).
// other_mode_differences() names the paths the two rules decide differently.
//
// Keys are ECMAScript regexes (std::regex), Keras' are Python's: a key using
// Python syntax that ECMAScript rejects or reads otherwise ((?P<name>, inline
// flags such as (?i), \A, \Z, lookbehind) is a LayoutError saying what to
// write instead, never a key that silently matches nothing.
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

enum class KeyMatch { search, fullmatch };
// "search" or "fullmatch", as the config's layout_map_match names them.
const char* name(KeyMatch mode);

class LayoutMap {
 public:
  LayoutMap() = default;
  explicit LayoutMap(KeyMatch mode) : mode_(mode) {}
  KeyMatch key_match() const { return mode_; }
  // Throws LayoutError for a duplicate key or a key that is not a valid regex.
  void add(const std::string& key, TensorLayout layout);
  // The layout of variable `path` itself, ahead of every key (Keras: a
  // variable's own _layout before the LayoutMap): a model's `layouts:`.
  void pin(const std::string& path, TensorLayout layout);
  // The layout for `path`, or nullopt (replicated); throws LayoutError when two
  // keys match by regex and neither matches exactly.
  std::optional<TensorLayout> lookup(const std::string& path) const;
  // The key that decided, with its layout (lookup() without the key).
  struct Match {
    std::string key;  // a pinned path: the path
    TensorLayout layout;
    bool pinned = false;
  };
  std::optional<Match> match(const std::string& path) const { return match(path, mode_); }
  std::optional<Match> match(const std::string& path, KeyMatch mode) const;
  // For each of `paths` that the other KeyMatch would decide differently (another
  // key, no key, or two keys), a line saying how each rule decides it.
  std::vector<std::string> other_mode_differences(const std::vector<std::string>& paths) const;
  std::vector<std::string> keys() const;  // in insertion order
  std::size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::string key;
    std::regex pattern;
    TensorLayout layout;
  };
  // "key 'K'", "no key (replicated)" or the error of two matching keys.
  std::string decision(const std::string& path, KeyMatch mode) const;

  KeyMatch mode_ = KeyMatch::search;
  std::vector<Entry> entries_;
  std::vector<std::pair<std::string, TensorLayout>> pinned_;  // by variable path
};

// A key whose regex matches exactly `path` (anchored, metacharacters escaped),
// for layout maps generated per variable (AutoTP, benchmarks).
std::string exact_key(const std::string& path);

}  // namespace tessera
