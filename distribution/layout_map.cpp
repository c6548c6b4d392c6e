#include "distribution/layout_map.hpp"

#include "engine/core/error.hpp"

namespace tessera {
namespace {

// Python regex syntax that ECMAScript (std::regex) rejects or reads otherwise:
// what it is, and what to write instead.
struct PythonOnly {
  std::regex pattern;
  const char* what;
  const char* instead;
};

void check_ecmascript(const std::string& key) {
  static const std::vector<PythonOnly> kPythonOnly = {
      {std::regex(R"(\(\?P<)"), "a named group (?P<name>...)", "an unnamed group (...)"},
      {std::regex(R"(\(\?P=)"), "a named backreference (?P=name)", "a numbered one, \\1"},
      {std::regex(R"(\(\?[aiLmsux]+[-:)])"), "an inline flag such as (?i)",
       "the cases spelled out ([Dd]ense) or the flag's effect written into the key"},
      {std::regex(R"(\(\?<[=!])"), "a lookbehind (?<=...) or (?<!...)", "a key that matches the text itself"},
      {std::regex(R"((^|[^\\])(\\\\)*\\A)"), "\\A (start of the path)", "^"},
      {std::regex(R"((^|[^\\])(\\\\)*\\Z)"), "\\Z (end of the path)", "$"},
  };
  for (const auto& p : kPythonOnly)
    if (std::regex_search(key, p.pattern))
      throw LayoutError("layout map: key '" + key + "' uses " + p.what +
                        ", Python regex syntax that Tessera's ECMAScript regexes reject or read differently; write " +
                        p.instead + " instead");
}

}  // namespace

const char* name(KeyMatch mode) { return mode == KeyMatch::search ? "search" : "fullmatch"; }

void LayoutMap::add(const std::string& key, TensorLayout layout) {
  for (const auto& e : entries_)
    if (e.key == key) throw LayoutError("layout map: key '" + key + "' is given twice");
  check_ecmascript(key);
  try {
    entries_.push_back(Entry{key, std::regex(key, std::regex::ECMAScript), std::move(layout)});
  } catch (const std::regex_error& e) {
    throw LayoutError("layout map: key '" + key + "' is not a valid regular expression: " + e.what());
  }
}

void LayoutMap::pin(const std::string& path, TensorLayout layout) {
  for (const auto& [pinned, given] : pinned_)
    if (pinned == path) {
      if (given == layout) return;  // the same again (a run config read twice)
      throw LayoutError("layout map: variable '" + path + "' is given two layouts of its own, " + given.str() + " and " +
                        layout.str());
    }
  pinned_.emplace_back(path, std::move(layout));
}

std::optional<TensorLayout> LayoutMap::lookup(const std::string& path) const {
  auto found = match(path);
  if (!found) return std::nullopt;
  return found->layout;
}

std::optional<LayoutMap::Match> LayoutMap::match(const std::string& path, KeyMatch mode) const {
  for (const auto& [pinned, layout] : pinned_)
    if (pinned == path) return Match{path, layout, true};
  for (const auto& e : entries_)
    if (e.key == path) return Match{e.key, e.layout};
  const Entry* found = nullptr;
  for (const auto& e : entries_) {
    const bool hit = mode == KeyMatch::search ? std::regex_search(path, e.pattern) : std::regex_match(path, e.pattern);
    if (!hit) continue;
    if (found != nullptr)
      throw LayoutError("layout map: variable '" + path + "' matches two keys, '" + found->key + "' and '" +
                        e.key + "'; make one of them more specific");
    found = &e;
  }
  if (found == nullptr) return std::nullopt;
  return Match{found->key, found->layout};
}

std::string LayoutMap::decision(const std::string& path, KeyMatch mode) const {
  try {
    auto found = match(path, mode);
    if (found && found->pinned) return "its own layout";
    return found ? "key '" + found->key + "'" : "no key (replicated)";
  } catch (const LayoutError&) {
    return "two keys (an error)";
  }
}

std::vector<std::string> LayoutMap::other_mode_differences(const std::vector<std::string>& paths) const {
  const KeyMatch other = mode_ == KeyMatch::search ? KeyMatch::fullmatch : KeyMatch::search;
  std::vector<std::string> lines;
  for (const auto& path : paths) {
    const std::string now = decision(path, mode_), then = decision(path, other);
    if (now != then)
      lines.push_back("'" + path + "' is decided by " + now + " under layout_map_match: " + name(mode_) + ", by " +
                      then + " under " + name(other) + (other == KeyMatch::fullmatch ? " (Keras 3.14 and later)" : " (Keras up to 3.13)"));
  }
  return lines;
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
