#include "engine/config/config.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>
#include <system_error>

#include "engine/core/error.hpp"

namespace tessera {
namespace detail {

// A value that came from elsewhere: an override, or a copy that `set` took
// from another document. Its marks are positions in `source`, if any.
struct Graft {
  YAML::Node node;
  std::string source;               // "other.yaml", or "override 'a.b=1'"
  bool marked;                      // false for overrides: positions in one line say little
  std::filesystem::path base_dir;   // what its relative paths start from
};

// What every node of one loaded document shares.
struct ConfigDocument {
  std::string label;                 // the file name as given, or the parse label
  std::filesystem::path base_dir;    // its folder, "." when it has none
  std::vector<Graft> grafts;
};

struct ConfigNodeState {
  std::shared_ptr<ConfigDocument> doc;
  // A handle: copies refer to the same node. Never assign one YAML::Node to
  // another here, since yaml-cpp's operator= rewrites the node referred to,
  // and look keys up through a const node, since a non-const operator[]
  // inserts the key.
  YAML::Node node;
  std::string path;                  // "model.layers[2].units"
  std::string where;                 // "file:line:col", or the override
  std::string source;                // what this node's marks are positions in
  bool marked = true;                // false under an override
  // Relative paths start from the folder of the file a value was written in;
  // from the working directory for an override, typed on the command line.
  std::filesystem::path base_dir;
};

}  // namespace detail

namespace {

using detail::ConfigDocument;
using State = detail::ConfigNodeState;

std::string location_of(const std::string& label, const YAML::Mark& mark) {
  if (mark.is_null()) return label;
  return label + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
}

// "file:l:c: path: " (no path for the root).
std::string prefix(const State& state) {
  return state.where + ": " + (state.path.empty() ? "" : state.path + ": ");
}

[[noreturn]] void throw_at(const State& state, const std::string& what) {
  throw ConfigError(prefix(state) + what);
}

// Plain scalars take their type from their text; quoted ones are strings.
bool is_quoted(const YAML::Node& node) { return node.Tag() == "!"; }

std::string flow_text(const YAML::Node& node) {
  YAML::Emitter out;
  out.SetSeqFormat(YAML::Flow);
  out.SetMapFormat(YAML::Flow);
  out << node;
  return out.c_str();
}

std::string key_text(const YAML::Node& key) { return key.IsScalar() ? key.Scalar() : flow_text(key); }

// How a value reads in "expected X, got Y".
std::string found(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: return "a map";
    case YAML::NodeType::Sequence: return "a sequence";
    case YAML::NodeType::Scalar: {
      std::string text = node.Scalar();
      if (text.size() > 60) text = text.substr(0, 57) + "...";
      return (is_quoted(node) ? "the quoted string '" : "'") + text + "'";
    }
    default: return "null (an empty value)";
  }
}

std::string join(const std::vector<std::string>& words) {
  std::string s;
  for (const auto& w : words) s += (s.empty() ? "" : ", ") + w;
  return s.empty() ? "(none)" : s;
}

const detail::Graft* find_graft(const ConfigDocument& doc, const YAML::Node& node) {
  for (const auto& graft : doc.grafts)
    if (node.is(graft.node)) return &graft;
  return nullptr;
}

// The state of `node`, reached from `parent` by `path`; `key` is its key node
// when it is a map value.
std::shared_ptr<const State> make_child(const State& parent, const YAML::Node& node,
                                        std::string path, const YAML::Node* key) {
  State child{parent.doc, node, std::move(path), parent.where, parent.source, parent.marked, parent.base_dir};
  if (const auto* graft = find_graft(*parent.doc, node)) {
    child.source = graft->source;
    child.marked = graft->marked;
    child.base_dir = graft->base_dir;
    child.where = graft->source;
    key = nullptr;  // the key was written here, the value comes from the source
  }
  if (child.marked) {
    // An empty value's mark lies on the token after it; its key's is clearer.
    YAML::Mark mark = node.IsNull() && key ? key->Mark() : node.Mark();
    if (!mark.is_null()) child.where = location_of(child.source, mark);  // else written here
  }
  return std::make_shared<const State>(std::move(child));
}

// False for null (an empty map); throws for scalars and sequences.
bool require_map(const State& state) {
  if (state.node.IsMap()) return true;
  if (state.node.IsNull()) return false;
  throw_at(state, "expected a map, got " + found(state.node));
}

// The first pair with this key: yaml-cpp keeps duplicate keys, which
// expect_keys reports.
std::optional<std::pair<YAML::Node, YAML::Node>> find_pair(const YAML::Node& map,
                                                           const std::string& key) {
  if (!map.IsMap()) return std::nullopt;
  for (auto it = map.begin(); it != map.end(); ++it)
    if (it->first.IsScalar() && it->first.Scalar() == key) return std::pair{it->first, it->second};
  return std::nullopt;
}

// Where errors about a key point: the key, or for a key that an override or
// a copy added, where its value came from.
std::string key_location(const State& map, const YAML::Node& key, const YAML::Node& value) {
  if (const auto* graft = find_graft(*map.doc, value))
    return graft->marked ? location_of(graft->source, value.Mark()) : graft->source;
  if (!map.marked || key.Mark().is_null()) return map.where;
  return location_of(map.source, key.Mark());
}

YAML::Node load_yaml(const std::string& text, const std::string& label) {
  try {
    return YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw ConfigError(location_of(label, e.mark) + ": " + e.msg);
  }
}

std::shared_ptr<const State> make_root(const std::string& text, const std::string& label,
                                       std::filesystem::path base_dir) {
  auto doc = std::make_shared<ConfigDocument>();
  doc->label = label;
  doc->base_dir = base_dir.empty() ? std::filesystem::path(".") : std::move(base_dir);
  YAML::Node node = load_yaml(text, label);
  // An empty document loads as a handle to no node at all, which writes
  // could not reach through copies; give it a real (null) node.
  if (node.IsNull()) node.reset(YAML::Node(YAML::NodeType::Null));
  std::string where = location_of(label, node.Mark());
  std::filesystem::path root_dir = doc->base_dir;
  return std::make_shared<const State>(State{std::move(doc), node, "", std::move(where), label, true, std::move(root_dir)});
}

// ---- scalars: text to value -------------------------------------------------

// Drops a leading '+' that from_chars would refuse ("+3", "+.5"), never "+-3".
std::string_view without_plus(std::string_view text) {
  if (text.size() > 1 && text[0] == '+' && text[1] != '-' && text[1] != '+') text.remove_prefix(1);
  return text;
}

bool read_bool(const State& state) {
  const YAML::Node& n = state.node;
  if (n.IsScalar() && !is_quoted(n)) {
    static const char* const yes[] = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"};
    static const char* const no[] = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"};
    for (const char* word : yes)
      if (n.Scalar() == word) return true;
    for (const char* word : no)
      if (n.Scalar() == word) return false;
  }
  throw_at(state, "expected a boolean (true or false), got " + found(n));
}

std::int64_t read_integer(const State& state, std::int64_t low, std::int64_t high) {
  const YAML::Node& n = state.node;
  if (n.IsScalar() && !is_quoted(n)) {
    std::string_view text = without_plus(n.Scalar());
    const char* end = text.data() + text.size();
    std::int64_t value = 0;
    auto [stop, error] = std::from_chars(text.data(), end, value);
    if (stop == end && !text.empty()) {  // all digits: an integer, maybe too large
      if (error == std::errc() && value >= low && value <= high) return value;
      throw_at(state, "expected an integer in [" + std::to_string(low) + ", " + std::to_string(high) +
                      "], got " + found(n));
    }
  }
  throw_at(state, "expected an integer, got " + found(n));
}

double read_double(const State& state) {
  const YAML::Node& n = state.node;
  if (n.IsScalar() && !is_quoted(n)) {
    const std::string& s = n.Scalar();
    // YAML's spellings of the special values.
    if (s == ".inf" || s == ".Inf" || s == ".INF" || s == "+.inf" || s == "+.Inf" || s == "+.INF")
      return std::numeric_limits<double>::infinity();
    if (s == "-.inf" || s == "-.Inf" || s == "-.INF") return -std::numeric_limits<double>::infinity();
    if (s == ".nan" || s == ".NaN" || s == ".NAN") return std::numeric_limits<double>::quiet_NaN();
    std::string_view text = without_plus(s);
    const char* end = text.data() + text.size();
    double value = 0;
    auto [stop, error] = std::from_chars(text.data(), end, value);
    if (stop == end && error == std::errc::result_out_of_range)
      throw_at(state, "expected a number, got " + found(n) + ", which is out of range");
    if (stop == end && error == std::errc() && !text.empty()) return value;
  }
  throw_at(state, "expected a number, got " + found(n));
}

float read_float(const State& state) {
  double value = read_double(state);
  if (std::isfinite(value) && std::abs(value) > std::numeric_limits<float>::max())
    throw_at(state, "expected a number in float range, got " + found(state.node));
  return static_cast<float>(value);
}

std::string read_string(const State& state) {
  if (!state.node.IsScalar()) throw_at(state, "expected a string, got " + found(state.node));
  return state.node.Scalar();
}

// ---- values to nodes ---------------------------------------------------------

// The shortest text that reads back as the same value, and still looks like
// a float ("1.0", not "1").
template <typename F>
std::string format_float(F v) {
  if (std::isnan(v)) return ".nan";
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, v);
  std::string text(buffer, result.ptr);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

YAML::Node encode(bool v) { return YAML::Node(std::string(v ? "true" : "false")); }
YAML::Node encode(int v) { return YAML::Node(std::to_string(v)); }
YAML::Node encode(std::int64_t v) { return YAML::Node(std::to_string(v)); }
YAML::Node encode(double v) { return YAML::Node(format_float(v)); }
YAML::Node encode(float v) { return YAML::Node(format_float(v)); }
YAML::Node encode(const std::string& v) { return YAML::Node(v); }

template <typename E>
YAML::Node encode(const std::vector<E>& items) {
  YAML::Node sequence(YAML::NodeType::Sequence);
  for (const E& item : items) sequence.push_back(encode(item));
  sequence.SetStyle(YAML::EmitterStyle::Flow);  // short lists read best on one line
  return sequence;
}

// Writes `key` of a map (a null becomes a map), replacing any value.
void assign(const State& state, const std::string& key, const YAML::Node& value) {
  require_map(state);
  YAML::Node map = state.node;  // shares the node: handles are references
  map[key] = value;
}

template <typename T>
struct IsVector : std::false_type {};
template <typename E>
struct IsVector<std::vector<E>> : std::true_type {};

template <typename E>
std::string sequence_of() {
  if constexpr (std::is_same_v<E, std::string>) return "a sequence of strings";
  else if constexpr (std::is_floating_point_v<E>) return "a sequence of numbers";
  else return "a sequence of integers";
}

}  // namespace

// ---- ConfigNode ---------------------------------------------------------------

ConfigNode ConfigNode::load_file(const std::filesystem::path& file) {
  std::error_code ec;
  if (!std::filesystem::exists(file, ec))
    throw ConfigError("config file '" + file.string() + "' does not exist");
  if (std::filesystem::is_directory(file, ec))
    throw ConfigError("config file '" + file.string() + "' is a folder, not a file");
  std::ifstream in(file, std::ios::binary);
  if (!in) throw ConfigError("cannot open config file '" + file.string() + "'");
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) throw ConfigError("cannot read config file '" + file.string() + "'");
  return ConfigNode(make_root(text, file.string(), file.parent_path()));
}

ConfigNode ConfigNode::parse(const std::string& text, const std::string& file_label) {
  return ConfigNode(make_root(text, file_label, std::filesystem::path(file_label).parent_path()));
}

bool ConfigNode::is_map() const { return state_->node.IsMap(); }
bool ConfigNode::is_sequence() const { return state_->node.IsSequence(); }
bool ConfigNode::is_scalar() const { return state_->node.IsScalar(); }
bool ConfigNode::is_null() const { return state_->node.IsNull(); }

std::size_t ConfigNode::size() const {
  const YAML::Node& n = state_->node;
  return n.IsSequence() || n.IsMap() ? n.size() : 0;
}

ConfigNode ConfigNode::at(std::size_t index) const {
  const State& s = *state_;
  if (!s.node.IsSequence()) throw_at(s, "expected a sequence, got " + found(s.node));
  if (index >= s.node.size())
    throw_at(s, "index " + std::to_string(index) + " is out of range (the sequence has " +
                std::to_string(s.node.size()) + " items)");
  return ConfigNode(make_child(s, s.node[index], s.path + "[" + std::to_string(index) + "]", nullptr));
}

std::vector<std::string> ConfigNode::keys() const {
  std::vector<std::string> out;
  if (!require_map(*state_)) return out;
  for (auto it = state_->node.begin(); it != state_->node.end(); ++it) out.push_back(key_text(it->first));
  return out;
}

bool ConfigNode::has(const std::string& key) const {
  return require_map(*state_) && find_pair(state_->node, key).has_value();
}

std::optional<ConfigNode> ConfigNode::find(const std::string& key) const {
  if (!require_map(*state_)) return std::nullopt;
  auto pair = find_pair(state_->node, key);
  if (!pair) return std::nullopt;
  std::string path = state_->path.empty() ? key : state_->path + "." + key;
  return ConfigNode(make_child(*state_, pair->second, std::move(path), &pair->first));
}

ConfigNode ConfigNode::operator[](const std::string& key) const {
  if (auto child = find(key)) return *child;
  std::string message = "missing required key '" + key + "'";
  std::string near = did_you_mean(key, keys());
  if (!near.empty()) message += " (is '" + near + "' a misspelling of it?)";
  throw_at(*state_, message);
}

template <ConfigValue T>
T ConfigNode::as() const {
  if constexpr (IsVector<T>::value) {
    using E = typename T::value_type;
    if (!state_->node.IsSequence())
      throw_at(*state_, "expected " + sequence_of<E>() + ", got " + found(state_->node));
    T items;
    items.reserve(size());
    for (std::size_t i = 0; i < size(); ++i) items.push_back(at(i).as<E>());
    return items;
  } else if constexpr (std::is_same_v<T, bool>) {
    return read_bool(*state_);
  } else if constexpr (std::is_same_v<T, int>) {
    return static_cast<int>(read_integer(*state_, std::numeric_limits<int>::min(),
                                         std::numeric_limits<int>::max()));
  } else if constexpr (std::is_same_v<T, std::int64_t>) {
    return read_integer(*state_, std::numeric_limits<std::int64_t>::min(),
                        std::numeric_limits<std::int64_t>::max());
  } else if constexpr (std::is_same_v<T, double>) {
    return read_double(*state_);
  } else if constexpr (std::is_same_v<T, float>) {
    return read_float(*state_);
  } else {
    return read_string(*state_);
  }
}

template <ConfigValue T>
T ConfigNode::get(const std::string& key, const T& default_value) const {
  if (auto value = find(key)) return value->as<T>();
  assign(*state_, key, encode(default_value));
  return default_value;
}

std::string ConfigNode::get(const std::string& key, const char* default_value) const {
  return get<std::string>(key, default_value);
}

template <ConfigValue T>
void ConfigNode::set(const std::string& key, const T& value) {
  assign(*state_, key, encode(value));
}

void ConfigNode::set(const std::string& key, const char* value) { set<std::string>(key, value); }

void ConfigNode::set(const std::string& key, const ConfigNode& value) {
  const State& from = *value.state_;
  if (from.doc == state_->doc) {
    // A copy, so that the two places do not alias (and dump without anchors).
    // Copies lose their positions, so errors point at the original.
    YAML::Node copy = YAML::Clone(from.node);
    assign(*state_, key, copy);
    state_->doc->grafts.push_back({copy, from.where, false, from.base_dir});
  } else {
    // Shared with the other document, whose positions stay exact.
    assign(*state_, key, from.node);
    state_->doc->grafts.push_back({from.node, from.source, from.marked, from.base_dir});
  }
}

void ConfigNode::fail(const std::string& what) const { throw_at(*state_, what); }

void ConfigNode::fail_unknown(const std::string& what, const std::string& value,
                              const std::vector<std::string>& known) const {
  std::string hint = did_you_mean(value, known), list;
  for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
  fail("unknown " + what + " '" + value + "'" + (hint.empty() ? "" : " (did you mean '" + hint + "'?)") +
       "; known: " + list);
}

#define TESSERA_CONFIG_VALUE(T)                                                      \
  template T ConfigNode::as<T>() const;                                              \
  template T ConfigNode::get<T>(const std::string&, const T&) const;                 \
  template void ConfigNode::set<T>(const std::string&, const T&);
TESSERA_CONFIG_VALUE(bool)
TESSERA_CONFIG_VALUE(int)
TESSERA_CONFIG_VALUE(std::int64_t)
TESSERA_CONFIG_VALUE(double)
TESSERA_CONFIG_VALUE(float)
TESSERA_CONFIG_VALUE(std::string)
TESSERA_CONFIG_VALUE(std::vector<int>)
TESSERA_CONFIG_VALUE(std::vector<std::int64_t>)
TESSERA_CONFIG_VALUE(std::vector<double>)
TESSERA_CONFIG_VALUE(std::vector<std::string>)
#undef TESSERA_CONFIG_VALUE

void ConfigNode::expect_keys(const std::vector<std::string>& known) const {
  const State& s = *state_;
  if (!require_map(s)) return;
  std::string path = s.path.empty() ? "" : s.path + ": ";
  std::vector<std::pair<std::string, std::string>> seen;  // key, its location
  for (auto it = s.node.begin(); it != s.node.end(); ++it) {
    std::string key = key_text(it->first);
    std::string location = key_location(s, it->first, it->second);
    std::string where = location + ": " + path;
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      std::string message = where + "unknown key '" + key + "'";
      std::string near = did_you_mean(key, known);
      if (!near.empty()) message += " (did you mean '" + near + "'?)";
      throw ConfigError(message + "; known keys: " + join(known));
    }
    for (const auto& [earlier, earlier_location] : seen)
      if (earlier == key)
        throw ConfigError(where + "key '" + key + "' appears twice (first at " + earlier_location + ")");
    seen.emplace_back(key, location);
  }
}

std::string ConfigNode::path() const { return state_->path; }
std::string ConfigNode::location() const { return state_->where; }
std::filesystem::path ConfigNode::base_dir() const { return state_->base_dir; }

std::filesystem::path ConfigNode::resolve_path(const std::string& relative) const {
  std::filesystem::path p(relative);
  if (p.is_absolute()) return p;
  return (state_->base_dir / p).lexically_normal();
}

std::string ConfigNode::dump() const {
  YAML::Emitter out;
  out.SetIndent(2);
  out << state_->node;
  if (!out.good()) throw ConfigError(prefix(*state_) + "cannot write YAML: " + out.GetLastError());
  return std::string(out.c_str()) + "\n";
}

// ---- overrides ------------------------------------------------------------------

namespace {

[[noreturn]] void override_error(const std::string& assignment, const std::string& why) {
  throw ConfigError("override '" + assignment + "': " + why);
}

// "model.layers.1.units" or "model.layers[1].units" -> model, layers, 1, units.
std::vector<std::string> split_override_path(const std::string& assignment, const std::string& path) {
  std::string dotted;  // "[1]" written as ".1"
  for (std::size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '[') {
      std::size_t close = path.find(']', i);
      if (close == std::string::npos) override_error(assignment, "'[' without ']' in the path");
      dotted += "." + path.substr(i + 1, close - i - 1);
      i = close;
    } else if (path[i] == ']') {
      override_error(assignment, "']' without '[' in the path");
    } else {
      dotted += path[i];
    }
  }
  std::vector<std::string> parts(1);
  for (char c : dotted) {
    if (c == '.') parts.emplace_back();
    else parts.back() += c;
  }
  for (const auto& part : parts)
    if (part.empty()) override_error(assignment, "the path '" + path + "' has an empty component");
  return parts;
}

std::string trim(const std::string& s) {
  auto first = s.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

// The item of a sequence that `part` names, checked against its size.
std::size_t override_index(const std::string& assignment, const YAML::Node& sequence,
                           const std::string& part, const std::string& walked) {
  std::size_t index = 0;
  auto [stop, error] = std::from_chars(part.data(), part.data() + part.size(), index);
  if (error != std::errc() || stop != part.data() + part.size())
    override_error(assignment, "'" + walked + "' is a sequence, and '" + part + "' is not an index");
  if (index >= sequence.size())
    override_error(assignment, "index " + part + " is out of range for '" + walked + "', which has " +
                                   std::to_string(sequence.size()) + " items");
  return index;
}

}  // namespace

void apply_override(ConfigNode& root, const std::string& assignment) {
  std::size_t eq = assignment.find('=');
  if (eq == std::string::npos)
    override_error(assignment, "expected path=value, e.g. model.layers.1.units=64");
  std::string path = trim(assignment.substr(0, eq));
  if (path.empty()) override_error(assignment, "the path before '=' is empty");
  std::vector<std::string> parts = split_override_path(assignment, path);

  YAML::Node value;
  try {
    value.reset(YAML::Load(assignment.substr(eq + 1)));
  } catch (const YAML::ParserException& e) {
    override_error(assignment, "the value is not valid YAML: " + e.msg);
  }

  YAML::Node node;
  node.reset(root.state_->node);
  std::string walked = root.state_->path;  // the YAML path of `node`, for messages
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const std::string& part = parts[i];
    bool last = i + 1 == parts.size();
    if (node.IsSequence()) {
      std::size_t index = override_index(assignment, node, part, walked);
      if (last) node[index] = value;
      else node.reset(node[index]);
      walked += "[" + part + "]";
    } else if (node.IsMap() || node.IsNull()) {
      if (last) {
        node[part] = value;
      } else {
        auto pair = find_pair(node, part);
        if (!pair) node[part] = YAML::Node(YAML::NodeType::Map);  // a missing level
        node.reset(pair ? pair->second : node[part]);
      }
      walked += (walked.empty() ? "" : ".") + part;
    } else {
      std::string what = walked.empty() ? "the top level" : "'" + walked + "'";
      override_error(assignment, what + " is a scalar (" + found(node) + "), so it has no '" + part + "'");
    }
  }
  root.state_->doc->grafts.push_back({value, "override '" + assignment + "'", false, "."});
}

// ---- did you mean -----------------------------------------------------------------

namespace {

// Optimal string alignment distance: insertions, deletions, substitutions and
// swaps of two adjacent letters ("untis" -> "units") each cost one.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i)
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

}  // namespace

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  std::size_t limit = std::max<std::size_t>(2, word.size() / 3);
  std::string best;
  std::size_t best_distance = limit + 1;
  for (const auto& candidate : candidates) {
    std::size_t d = edit_distance(word, candidate);
    // Rewriting every letter is no resemblance ("x" for "lr").
    if (d < best_distance && d < std::max(word.size(), candidate.size())) {
      best = candidate;
      best_distance = d;
    }
  }
  return best;
}

}  // namespace tessera
