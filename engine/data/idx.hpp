// MNIST's IDX format (http://yann.lecun.com/exdb/mnist/), as Fashion-MNIST
// ships it too: big-endian headers, u8 pixels and labels, optionally gzipped
// (detected by the gzip magic, not by the file name).
//
// Debian's dataset-fashion-mnist package installs them under
// /usr/share/datasets/fashion-mnist/ (train-images-idx3-ubyte.gz, ...).
#pragma once

#include <filesystem>

#include "engine/data/dataset.hpp"

namespace tessera {

// Images (magic 0x00000803, u8 [N, rows, cols]) become f32 [N, rows, cols]
// times `scale` (by default to [0, 1]: a run config's data `rescale:`);
// labels (magic 0x00000801, u8 [N]) become i32 [N]. Throws DataError naming
// the file for a missing file, a bad magic, a size that does not match the
// header (expected vs actual bytes) or differing counts.
Dataset load_idx(const std::filesystem::path& images_path, const std::filesystem::path& labels_path,
                 float scale = 1.0f / 255.0f);
// The images alone (for prediction): f32 [N, rows, cols] times `scale`.
Tensor load_idx_images(const std::filesystem::path& images_path, float scale = 1.0f / 255.0f);

}  // namespace tessera
