// safetensors files (the Hugging Face format), read and written without
// anything beyond the format's own description:
//
//   8 bytes    N, little-endian u64: the header's length
//   N bytes    JSON {"__metadata__": {"key": "value", ...},
//                    "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, ...}
//              padded with spaces to a multiple of 8 bytes, as the reference writer does
//   the rest   the tensors' raw little-endian bytes, back to back; data_offsets
//              count from the end of the header
//
// Dtypes: F32, BF16, I32, I64 (Tessera's own); a file with another dtype is
// rejected, not converted. Files written here load in the reference readers
// (safetensors.torch/numpy) and vice versa for these dtypes.
//
// Integrity: a file written from whole tensors records each tensor's CRC-32
// in its metadata, under "tessera.crc32" (a JSON object, name -> 8 hex
// digits, as metadata values must be strings). Readers here check it wherever
// they read a tensor whole; a mismatch is a CheckpointError naming the file
// and the tensor. Files without it (other writers', streamed exports) load
// unchecked.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/core/tensor.hpp"

namespace tessera {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

struct SafetensorsFile {
  NamedTensors tensors;  // in data order, which is the writer's order for files written here
  std::map<std::string, std::string> metadata;
};

// Writes `tensors` (host tensors, in this order, names unique) and `metadata`
// to `path` atomically: a temporary file beside it, fsync, rename, so `path`
// holds the old content or the new, never a torn file. Throws CheckpointError
// naming the file (and tensor) for an undefined or non-host tensor, a
// duplicate or reserved name ("__metadata__"), or a failed write.
void save_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// The same for tensors made a piece at a time: `entries` gives each one's
// name, dtype and shape (in this order), and `rows(i, begin, end)` makes the
// host tensor of entry i's rows [begin, end) of its first dimension (the
// whole of a scalar), just before they are written, released once they are.
// Each piece is the most rows that fit in `piece_bytes` (at least one), so
// neither the file nor any of its tensors is ever in memory whole (a
// consolidated export of a model larger than memory).
struct TensorSpec {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
};
using RowsOf = std::function<Tensor(std::size_t i, std::int64_t begin, std::int64_t end)>;
void save_safetensors(const std::filesystem::path& path, const std::vector<TensorSpec>& entries, const RowsOf& rows,
                      std::uint64_t piece_bytes, const std::map<std::string, std::string>& metadata = {});

// Reads and validates a whole file into new host tensors. Everything is
// checked before a tensor is read: the header length against the file size,
// the JSON, each entry's dtype, shape and data_offsets (inside the data, not
// overlapping, shape x dtype size == byte length, no gaps or trailing bytes).
// Throws CheckpointError naming the file and, where one is at fault, the tensor.
SafetensorsFile load_safetensors(const std::filesystem::path& path);

// One tensor of a file's header, checked as load_safetensors checks it.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;
  std::uint64_t offset = 0;  // where its bytes start, counted from the start of the file
  std::uint64_t bytes = 0;   // numel x dtype size
  std::optional<std::uint32_t> crc32;  // of its bytes, when the writer recorded it
};

// The CRC-32 (zlib's) of `bytes` at `data`, continuing from `crc` (0 to start).
std::uint32_t crc32_of(const void* data, std::size_t bytes, std::uint32_t crc = 0);
// The error a tensor whose bytes do not match its recorded CRC-32 raises.
std::string checksum_mismatch(std::uint32_t recorded, std::uint32_t found);

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;  // in data order
  std::map<std::string, std::string> metadata;
  // The entry named `name`, or nullptr.
  const SafetensorsEntry* find(const std::string& name) const;
};

// Reads and validates only the header of `path` (all the checks of
// load_safetensors except reading the data), for readers that then read parts
// of the data themselves. Throws CheckpointError naming the file and tensor.
SafetensorsHeader read_safetensors_header(const std::filesystem::path& path);

// "F32", "BF16", "I32", "I64": the format's names of Tessera's dtypes.
std::string safetensors_dtype_name(DType dtype);
// The inverse: nullopt for a name that is not one of those four.
std::optional<DType> parse_safetensors_dtype(std::string_view name);

}  // namespace tessera
