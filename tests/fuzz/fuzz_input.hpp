// What the fuzz targets share: each input becomes a file, as a user's would,
// in a folder of this process's own.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace tessera::fuzz {

// This process's scratch folder (made on first use, under $TMPDIR or /tmp,
// removed when the fuzzer exits).
inline const std::filesystem::path& scratch() {
  struct Folder {
    std::filesystem::path path = std::filesystem::temp_directory_path() / ("tessera-fuzz-" + std::to_string(::getpid()));
    Folder() { std::filesystem::create_directories(path); }
    ~Folder() {
      std::error_code ignored;  // nothing to do about a folder that cannot go
      std::filesystem::remove_all(path, ignored);
    }
  };
  static const Folder folder;
  return folder.path;
}

// Writes the input to `path`, replacing what was there.
inline void write_input(const std::filesystem::path& path, const std::uint8_t* data, std::size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

}  // namespace tessera::fuzz
