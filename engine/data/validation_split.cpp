#include "engine/data/validation_split.hpp"

#include <cmath>

#include "engine/core/error.hpp"

namespace tessera {
namespace {

Dataset rows_of(const Dataset& data, std::int64_t first, std::int64_t count, const std::string& part) {
  Dataset out = data;
  out.inputs = data.inputs.rows(first, count);
  out.targets = data.targets.rows(first, count);
  if (data.weights.defined()) out.weights = data.weights.rows(first, count);
  out.source = data.source + " (" + part + ")";
  return out;
}

}  // namespace

std::int64_t training_part(std::int64_t n, double fraction) {
  return static_cast<std::int64_t>(std::floor(static_cast<double>(n) * (1.0 - fraction)));
}

std::pair<Dataset, Dataset> split_validation(const Dataset& data, double fraction) {
  if (!(fraction > 0 && fraction < 1))
    throw DataError("validation_split must lie in (0, 1), got " + std::to_string(fraction));
  const std::int64_t n = data.size();
  const std::int64_t cut = training_part(n, fraction);
  if (cut < 1 || cut >= n)
    throw DataError(data.label() + ": validation_split " + std::to_string(fraction) + " of " + std::to_string(n) +
                    " samples leaves " + (cut < 1 ? "nothing to train on" : "no sample to validate on"));
  const std::string percent = std::to_string(static_cast<int>(std::lround(fraction * 100)));
  return {rows_of(data, 0, cut, "first " + std::to_string(cut) + " samples"),
          rows_of(data, cut, n - cut, "last " + percent + "%, validation_split")};
}

}  // namespace tessera
