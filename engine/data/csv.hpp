// Numeric CSV tables: one sample per row, one column holding the target (a
// class id, or a number to regress on), and optionally one its weight.
#pragma once

#include <filesystem>
#include <string>

#include "engine/data/dataset.hpp"

namespace tessera {

// Reads a comma-separated table of numbers. Every column but the label
// column becomes f32 inputs [N, C-1] (in file order). The label column
// becomes i32 targets [N] when it holds only non-negative integers (class
// ids), else f32 targets [N] (regression). `label_column` is a column's
// name from the header, or its number counted from 0 (negative: from the
// end, -1 the last); messages count columns from 0 too. With `has_header`
// the first line holds column names and is skipped. Blank lines are
// skipped, "\r\n" line ends and spaces around cells are accepted. Throws
// DataError naming file:line and the column for a cell that is not a
// (finite) number, a row with the wrong number of columns, or a label
// column that does not exist. With `weight_column` (named or numbered as the
// label column) that column becomes the sample weights [N] instead of an
// input; a weight must be a finite number >= 0.
Dataset load_csv(const std::filesystem::path& path, const std::string& label_column, bool has_header,
                 const std::string& weight_column = "");
inline Dataset load_csv(const std::filesystem::path& path, int label_column, bool has_header) {
  return load_csv(path, std::to_string(label_column), has_header);
}

}  // namespace tessera
