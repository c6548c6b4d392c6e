#include "engine/data/csv.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>

#include "engine/data/detail.hpp"

namespace tessera {
namespace {

constexpr const char* kWhat = "load_csv";

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
  return s;
}

// Splits one line at commas into `cells` (reusing its storage).
void split(std::string_view line, std::vector<std::string_view>& cells) {
  cells.clear();
  for (;;) {
    std::size_t comma = line.find(',');
    cells.push_back(trim(line.substr(0, comma)));
    if (comma == std::string_view::npos) break;
    line.remove_prefix(comma + 1);
  }
}

template <typename T>
bool parse_number(std::string_view cell, T& out) {
  if (!cell.empty() && cell.front() == '+') cell.remove_prefix(1);  // from_chars rejects '+'
  auto [end, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), out);
  return ec == std::errc() && end == cell.data() + cell.size() && !cell.empty();
}

}  // namespace

Dataset load_csv(const std::filesystem::path& path, const std::string& label_column, bool has_header,
                 const std::string& weight_column) {
  auto file = data_detail::read_file(path, kWhat);
  std::string_view text(reinterpret_cast<const char*>(file.bytes.data()), file.bytes.size());

  std::vector<std::string> names;  // from the header, for messages
  std::vector<std::string_view> cells;
  std::vector<float> inputs, weights;
  std::vector<double> labels;
  std::size_t columns = 0, label = 0;
  std::optional<std::size_t> weight;
  std::int64_t line_number = 0;
  auto where = [&](std::size_t column) {
    std::string s = path.string() + ":" + std::to_string(line_number) + ": column " + std::to_string(column);
    if (column < names.size() && !names[column].empty()) s += " ('" + names[column] + "')";
    return s;
  };
  // A column given as a header name, or a number (negative: from the end).
  auto resolve = [&](const std::string& column, const char* role) {
    long number = 0;
    long resolved = -1;
    if (parse_number(std::string_view(column), number))  // a number is a position, even where a name is "0"
      resolved = number < 0 ? static_cast<long>(columns) + number : number;
    else if (const auto found = std::find(names.begin(), names.end(), column); found != names.end())
      resolved = found - names.begin();
    if (resolved < 0 || resolved >= static_cast<long>(columns)) {
      std::string known;
      for (const std::string& name : names) known += (known.empty() ? "" : ", ") + ("'" + name + "'");
      throw file_error(kWhat, path,
                       std::string(role) + " column '" + column + "' does not exist (the table has " +
                           std::to_string(columns) + " columns, numbered from 0" + (known.empty() ? "" : ": " + known) + ")");
    }
    return static_cast<std::size_t>(resolved);
  };
  // The first row fixes the column count and resolves the label and weight columns.
  auto set_columns = [&](std::size_t count) {
    columns = count;
    label = resolve(label_column, "label");
    if (!weight_column.empty()) {
      weight = resolve(weight_column, "weight");
      if (*weight == label)
        throw file_error(kWhat, path, "the weight column '" + weight_column + "' is the label column");
    }
    if (count < (weight ? 3u : 2u))
      throw file_error(kWhat, path, "needs at least one input column besides the label" +
                                        std::string(weight ? " and weight columns" : ""));
  };

  while (!text.empty()) {
    std::size_t newline = text.find('\n');
    std::string_view line = text.substr(0, newline);
    text.remove_prefix(newline == std::string_view::npos ? text.size() : newline + 1);
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (trim(line).empty()) continue;
    split(line, cells);
    if (has_header && names.empty() && columns == 0) {
      for (std::string_view cell : cells) names.emplace_back(cell);
      set_columns(cells.size());
      continue;
    }
    if (columns == 0) set_columns(cells.size());
    if (cells.size() != columns)
      throw DataError(std::string(kWhat) + ": " + path.string() + ":" +
                      std::to_string(line_number) + ": expected " + std::to_string(columns) +
                      " columns, got " + std::to_string(cells.size()));
    for (std::size_t c = 0; c < columns; ++c) {
      // Labels parse as double: exact for every i32, and "3.0" is accepted.
      float value = 0.0f;
      double label_value = 0.0;
      if (c == label ? !parse_number(cells[c], label_value) : !parse_number(cells[c], value))
        throw DataError(std::string(kWhat) + ": " + where(c) + ": '" + std::string(cells[c]) +
                        "' is not a number");
      if (c == weight) {
        // A negative weight would push the model away from the sample: never meant.
        if (!std::isfinite(value) || value < 0)
          throw DataError(std::string(kWhat) + ": " + where(c) + ": weight '" + std::string(cells[c]) +
                          "' is not a finite number >= 0");
        weights.push_back(value);
        continue;
      }
      if (c != label) {
        if (!std::isfinite(value))  // a NaN or inf feature would poison training silently
          throw DataError(std::string(kWhat) + ": " + where(c) + ": '" + std::string(cells[c]) +
                          "' is not a finite number");
        inputs.push_back(value);
        continue;
      }
      if (!std::isfinite(label_value))
        throw DataError(std::string(kWhat) + ": " + where(c) + ": label '" + std::string(cells[c]) +
                        "' is not a finite number");
      labels.push_back(label_value);
    }
  }
  if (labels.empty()) throw file_error(kWhat, path, "holds no data rows");

  const auto rows = static_cast<std::int64_t>(labels.size());
  Dataset data;
  data.inputs = Tensor::from_vector(inputs, Shape{rows, static_cast<std::int64_t>(columns - (weight ? 2 : 1))});
  data.source = path.string();
  // Class ids when every label is one; else numbers to regress on.
  const bool ids = std::all_of(labels.begin(), labels.end(), [](double v) {
    return v >= 0 && v == std::floor(v) && v <= std::numeric_limits<std::int32_t>::max();
  });
  data.targets = ids ? Tensor::from_vector(std::vector<std::int32_t>(labels.begin(), labels.end()), Shape{rows})
                     : Tensor::from_vector(std::vector<float>(labels.begin(), labels.end()), Shape{rows});
  if (weight) data.weights = Tensor::from_vector(weights, Shape{rows});
  return data;
}

}  // namespace tessera
