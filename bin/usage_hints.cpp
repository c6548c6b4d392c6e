#include "bin/usage_hints.hpp"

#include <algorithm>
#include <map>
#include <numeric>

namespace tessera {
namespace {

// Levenshtein distance: insertions, deletions and substitutions.
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), 0);
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t substitution = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      diagonal = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substitution});
    }
  }
  return row[b.size()];
}

}  // namespace

std::string closest_command(const std::string& typed, const std::vector<std::string>& commands) {
  std::string best;
  std::size_t best_distance = 3;  // more edits than two: no guess
  for (const std::string& command : commands)
    if (const std::size_t d = edit_distance(typed, command); d < best_distance) {
      best = command;
      best_distance = d;
    }
  return best;
}

std::string unexpected_option_hint(const std::string& name, const std::string& value) {
  if (!name.starts_with("--")) return "";
  std::string key = name.substr(2);
  std::replace(key.begin(), key.end(), '-', '_');
  // Keys users reach for as options, and where they live in a run config.
  static const std::map<std::string, std::string> known = {
      {"epochs", "training.epochs"},
      {"batch_size", "training.batch_size"},
      {"seed", "training.seed"},
      {"learning_rate", "training.optimizer.learning_rate"},
      {"lr", "training.optimizer.learning_rate"},
      {"optimizer", "training.optimizer.type"},
      {"loss", "training.loss"},
      {"precision", "training.precision"},
      {"mesh", "distribution.mesh.shape"},
  };
  const std::string shown = value.empty() || value.starts_with("-") ? "VALUE" : value;
  if (auto it = known.find(key); it != known.end())
    return "config values are set with --set: --set " + it->second + "=" + shown;
  return "config values are set with --set KEY=VALUE (tessera inspect CONFIG --resolved lists every key)";
}

}  // namespace tessera
