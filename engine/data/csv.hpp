// Numeric CSV tables: one sample per row, one column holding the class label.
#pragma once

#include <filesystem>

#include "engine/data/dataset.hpp"

namespace tessera {

// Reads a comma-separated table of numbers. Every column but `label_column`
// becomes f32 inputs [N, C-1] (in file order); the label column becomes i32
// targets [N] and must hold non-negative integers. `label_column` counts from
// 0; a negative value counts from the end (-1: the last column). With
// `has_header` the first line holds column names and is skipped. Blank lines
// are skipped, "\r\n" line ends and spaces around cells are accepted.
// Throws DataError naming file:line and the column for a cell that is not a
// number and for a row with the wrong number of columns.
Dataset load_csv(const std::filesystem::path& path, int label_column, bool has_header);

}  // namespace tessera
