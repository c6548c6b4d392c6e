// Durable file writes: a file replaced atomically (a reader, or a run resumed
// after a crash, sees the old file or the new one, never a torn one) and
// folder syncs that make renames durable. Shared by the data writers and the
// checkpoints.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

#include "engine/core/error.hpp"

namespace tessera {

// "what: 'path': message", the wording of every file error (loaders, writers,
// checkpoints).
DataError file_error(std::string_view what, const std::filesystem::path& path, const std::string& message);

struct ByteRange {
  const void* data;
  std::size_t size;
};

// Writes the concatenation of `parts` to `path` atomically: into a temporary
// file beside it, flushed to disk, then renamed over `path`.
void write_file_atomic(const std::filesystem::path& path, std::span<const ByteRange> parts,
                       std::string_view what);
inline void write_file_atomic(const std::filesystem::path& path,
                              std::initializer_list<ByteRange> parts, std::string_view what) {
  write_file_atomic(path, std::span<const ByteRange>(parts.begin(), parts.size()), what);
}
// The same with the parts made one at a time: `next(part)` sets the next part
// (its bytes valid until the following call) or returns false after the last,
// so that a file need never be in memory whole.
void write_file_atomic(const std::filesystem::path& path, const std::function<bool(ByteRange& part)>& next,
                       std::string_view what);

// fsync of a folder, making the renames and creations inside it durable. Best
// effort: a failure loses no data already written, so it is not reported.
void sync_directory(const std::filesystem::path& dir);

}  // namespace tessera
