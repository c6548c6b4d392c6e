// NumPy's .npy and .npz files (format 1.0 to 3.0, C order, little-endian).
//
// Loaded dtypes map onto the engine's: '<f4' -> f32, '<f8' -> f32 (converted),
// '<i4' -> i32, '<i8' -> i64, '|u1', '|i1' and '|b1' -> i32. Every error is a
// DataError naming the file (and, for an .npz, the array).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "engine/core/tensor.hpp"

namespace tessera {

Tensor load_npy(const std::filesystem::path& path);

// Array `name` of an .npz (a zip of .npy files, as numpy.savez writes it;
// entries stored or deflated). `name` may omit the ".npy" suffix; a missing
// name is a DataError listing the names the archive holds.
Tensor load_npz(const std::filesystem::path& path, const std::string& name);

// The array names an .npz holds, without the ".npy" suffix, in archive order.
std::vector<std::string> npz_names(const std::filesystem::path& path);

// Writes an f32, i32 or i64 CPU tensor as .npy (format 1.0), atomically (a
// temporary file renamed into place).
void save_npy(const std::filesystem::path& path, const Tensor& tensor);

}  // namespace tessera
