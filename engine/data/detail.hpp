// Internal helpers of the data module, shared by the loaders and the batch
// iterator; not part of the engine's interface.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/error.hpp"
#include "engine/tensor.hpp"

namespace tessera::data_detail {

// "what: 'path': message", the shape of every loader error.
DataError data_error(std::string_view what, const std::filesystem::path& path,
                     const std::string& message);

struct FileBytes {
  std::vector<std::uint8_t> bytes;
  bool gzipped = false;  // the file started with the gzip magic; `bytes` is the unpacked stream
};

// The whole content of `path`, gunzipped when it starts with the gzip magic
// (1f 8b). `what` names the caller in messages. Throws DataError for a missing
// or unreadable file and for corrupt or truncated gzip data.
FileBytes read_file(const std::filesystem::path& path, std::string_view what);

struct ByteRange {
  const void* data;
  std::size_t size;
};

// Writes the concatenation of `parts` to `path` atomically: into a temporary
// file beside it, flushed to disk, then renamed over `path`, so a reader (or a
// run resumed after a crash) sees the old file or the new one, never a torn one.
void write_file_atomic(const std::filesystem::path& path, std::span<const ByteRange> parts,
                       std::string_view what);
inline void write_file_atomic(const std::filesystem::path& path,
                              std::initializer_list<ByteRange> parts, std::string_view what) {
  write_file_atomic(path, std::span<const ByteRange>(parts.begin(), parts.size()), what);
}

// fsync of a folder, making the renames and creations inside it durable. Best
// effort: a failure loses no data already written, so it is not reported.
void sync_directory(const std::filesystem::path& dir);

// The array in the bytes of one .npy file; `what` and `source` (the file, or
// "archive.npz:name.npy") name it in errors.
Tensor parse_npy(const std::uint8_t* data, std::size_t size, std::string_view what,
                 const std::filesystem::path& source);

// A Philox key for sub-stream `stream` of `seed`, so that the streams of one
// seed (labels, features, the order of each epoch) are independent.
std::uint64_t stream_key(std::uint64_t seed, std::uint64_t stream);

// Little- and big-endian reads of unaligned fields.
inline std::uint32_t load_be32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}
inline std::uint16_t load_le16(const std::uint8_t* p) {
  return static_cast<std::uint16_t>(p[0] | (p[1] << 8));
}
inline std::uint32_t load_le32(const std::uint8_t* p) {
  return std::uint32_t{p[0]} | (std::uint32_t{p[1]} << 8) | (std::uint32_t{p[2]} << 16) |
         (std::uint32_t{p[3]} << 24);
}
inline std::uint64_t load_le64(const std::uint8_t* p) {
  return std::uint64_t{load_le32(p)} | (std::uint64_t{load_le32(p + 4)} << 32);
}

}  // namespace tessera::data_detail
