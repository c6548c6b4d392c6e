// Run configurations: YAML documents read with every error pointing at the
// file, line:column and YAML path of the value at fault.
//
// A ConfigNode is a handle to one node of a loaded document. Handles are cheap
// to copy and share the document, so a default that `get` records, or an
// override applied to the root, shows in every handle and in `root.dump()`:
// the dump is the resolved configuration (printed on request, stored in
// checkpoints). Readers say which keys they accept, so a misspelt key is an
// error, not a silently ignored setting.
//
//   ConfigNode root = ConfigNode::load_file("configs/mlp.yaml");
//   for (const auto& assignment : cli_overrides)       // "model.layers.1.units=64"
//     apply_override(root, assignment);
//   ConfigNode layers = root["model"]["layers"];        // missing key: ConfigError
//   for (std::size_t i = 0; i < layers.size(); ++i) {
//     ConfigNode layer = layers.at(i);                  // path "model.layers[i]"
//     layer.expect_keys({"type", "units", "activation", "use_bias"});
//     int units = layer["units"].as<int>();             // "expected an integer, got 'abc'"
//     bool use_bias = layer.get("use_bias", true);      // absent: true, written back
//   }
//   auto data = root.resolve_path(root["data"]["path"].as<std::string>());
//   std::cout << root.dump();                           // the resolved configuration
//
// Every error is a ConfigError whose message reads
//   configs/mlp.yaml:12:5: model.layers[0].units: expected an integer, got 'abc'
// with 1-based line:column as editors show them. yaml-cpp stays inside
// config.cpp.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/core/error.hpp"  // ConfigError, which every function here may throw

namespace tessera {

namespace detail {
struct ConfigNodeState;  // the yaml-cpp node, its path and location, the shared document
}

// The value types that `as`, `get` and `set` convert.
template <typename T>
concept ConfigValue =
    std::same_as<T, bool> || std::same_as<T, int> || std::same_as<T, std::int64_t> ||
    std::same_as<T, double> || std::same_as<T, float> || std::same_as<T, std::string> ||
    std::same_as<T, std::vector<int>> || std::same_as<T, std::vector<std::int64_t>> ||
    std::same_as<T, std::vector<double>> || std::same_as<T, std::vector<std::string>>;

class ConfigNode {
 public:
  // Reads a YAML file. A missing file or a syntax error throws ConfigError
  // ("configs/mlp.yaml:4:7: illegal map value").
  static ConfigNode load_file(const std::filesystem::path& file);
  // Parses YAML text; `file_label` stands for the file name in messages, and
  // its folder is the base of resolve_path.
  static ConfigNode parse(const std::string& text, const std::string& file_label = "<string>");

  bool is_map() const;
  bool is_sequence() const;
  bool is_scalar() const;
  bool is_null() const;  // `key:` with nothing after it, `~` or `null`

  // Sequences: the items, with paths "model.layers[2]". A map's size is its
  // number of keys; a scalar or null has size 0.
  std::size_t size() const;
  ConfigNode at(std::size_t index) const;  // not a sequence or out of range: ConfigError

  // Maps. Null counts as an empty map, so `optimizer:` with nothing under it
  // takes every default; a scalar or sequence throws ConfigError.
  std::vector<std::string> keys() const;  // in file order
  bool has(const std::string& key) const;
  ConfigNode operator[](const std::string& key) const;  // a required key
  std::optional<ConfigNode> find(const std::string& key) const;

  // The value converted to T. Quoted scalars are strings, so `units: "64"`
  // is not an integer. Wrong type: ConfigError saying what was expected and
  // what was found.
  template <ConfigValue T>
  T as() const;

  // An optional key: its value, or `default_value` when absent, which is then
  // written into the document so that the dump shows what the run used.
  // (Const because the handle does not change and the configuration's meaning
  // does not either: the default was already in force.)
  template <ConfigValue T>
  T get(const std::string& key, const T& default_value) const;
  std::string get(const std::string& key, const char* default_value) const;
  // get(), and a present value must pass `ok`, else a config error at it:
  // "<key> must <must>" (say `must` = "be >= 1").
  template <ConfigValue T, typename Ok>
  T get_checked(const std::string& key, const T& default_value, Ok ok, const std::string& must) const {
    const T value = get<T>(key, default_value);
    if (!ok(value)) (*this)[key].fail(key + " must " + must);
    return value;
  }

  // Unknown keys are errors: throws ConfigError for the first key of this map
  // that is not in `known`, or that appears twice, with a did-you-mean and the
  // list of known keys. Call it once per map a reader consumes.
  void expect_keys(const std::vector<std::string>& known) const;

  // Writes `key` of this map (made a map if null), replacing any value.
  template <ConfigValue T>
  void set(const std::string& key, const T& value);
  void set(const std::string& key, const char* value);
  // A node of another document (a model file a run config names) is shared
  // with it, and its errors still point into that file; a node of this
  // document is copied, so that the two places do not alias.
  void set(const std::string& key, const ConfigNode& value);

  std::string path() const;                 // "model.layers[2].units"; "" for the root
  std::string location() const;             // "configs/mlp.yaml:12:5", 1-based
  std::filesystem::path base_dir() const;   // the folder of the file this value was written in
  // `relative` taken from the file's folder, as a config author means it (from
  // the working directory for a value given by an override, as a command line
  // means it); an absolute path stays as it is.
  std::filesystem::path resolve_path(const std::string& relative) const;
  std::string dump() const;                 // YAML text of this node, block style

  // Throws ConfigError "location: path: what", for the checks a reader makes
  // itself ("epochs must be >= 1").
  [[noreturn]] void fail(const std::string& what) const;
  // Throws "location: path: unknown <what> '<value>' (did you mean '...'?);
  // known: a, b, c" — the one message for every misspelt name in a config.
  [[noreturn]] void fail_unknown(const std::string& what, const std::string& value,
                                 const std::vector<std::string>& known) const;

 private:
  explicit ConfigNode(std::shared_ptr<const detail::ConfigNodeState> state)
      : state_(std::move(state)) {}
  friend void apply_override(ConfigNode& root, const std::string& assignment);

  std::shared_ptr<const detail::ConfigNodeState> state_;
};

// Applies a command-line override `a.b.c=value`, the path taken from `root`.
// Sequence items are addressed by index, `model.layers.1.units=64` (or
// `model.layers[1].units=64`). The value is YAML, so `3`, `1.0e-3`, `true`,
// `[1, 2]` and `{a: 1}` keep their types. Missing map keys are created; a
// path through a scalar or an index out of range throws ConfigError naming
// the override. Values set this way report the override as their location.
void apply_override(ConfigNode& root, const std::string& assignment);

// The candidate closest to `word` by edit distance (adjacent swaps count as
// one edit), if within max(2, word length / 3) edits and fewer edits than the
// longer word has letters; otherwise "". Ties go to the earlier candidate.
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace tessera
