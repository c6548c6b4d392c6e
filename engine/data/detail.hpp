// Internal helpers of the data module, shared by the loaders and the batch
// iterator; not part of the engine's interface.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/byte_order.hpp"
#include "engine/core/error.hpp"
#include "engine/core/file_io.hpp"
#include "engine/core/tensor.hpp"

namespace tessera::data_detail {

struct FileBytes {
  std::vector<std::uint8_t> bytes;
  bool gzipped = false;  // the file started with the gzip magic; `bytes` is the unpacked stream
};

// The whole content of `path`, gunzipped when it starts with the gzip magic
// (1f 8b). `what` names the caller in messages. Throws DataError for a missing
// or unreadable file and for corrupt or truncated gzip data.
FileBytes read_file(const std::filesystem::path& path, std::string_view what);

// The array in the bytes of one .npy file; `what` and `source` (the file, or
// "archive.npz:name.npy") name it in errors.
Tensor parse_npy(const std::uint8_t* data, std::size_t size, std::string_view what,
                 const std::filesystem::path& source);

// A Philox key for sub-stream `stream` of `seed`, so that the streams of one
// seed (labels, features, the order of each epoch) are independent.
std::uint64_t stream_key(std::uint64_t seed, std::uint64_t stream);

}  // namespace tessera::data_detail
