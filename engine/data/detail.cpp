#include "engine/data/detail.hpp"

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <system_error>

#include "backends/philox.hpp"

namespace tessera::data_detail {
namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};

std::string errno_text(int error) { return std::generic_category().message(error); }

}  // namespace

FileBytes read_file(const std::filesystem::path& path, std::string_view what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw file_error(what, path, "is a directory");
  std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "rb"));
  if (!file) throw file_error(what, path, "cannot open: " + errno_text(errno));

  FileBytes out;
  std::uint8_t magic[2] = {0, 0};
  std::size_t got = std::fread(magic, 1, 2, file.get());
  out.gzipped = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  if (!out.gzipped) {
    auto size = std::filesystem::file_size(path, ec);
    if (ec) throw file_error(what, path, "cannot read its size: " + ec.message());
    out.bytes.resize(static_cast<std::size_t>(size));
    std::rewind(file.get());
    std::size_t read = std::fread(out.bytes.data(), 1, out.bytes.size(), file.get());
    if (read != out.bytes.size())
      throw file_error(
          what, path,
          "read " + std::to_string(read) + " of " + std::to_string(out.bytes.size()) + " bytes");
    return out;
  }

  file.reset();
  std::unique_ptr<gzFile_s, GzCloser> gz(gzopen(path.c_str(), "rb"));
  if (!gz) throw file_error(what, path, "cannot open: " + errno_text(errno));
  gzbuffer(gz.get(), 1u << 18);
  constexpr unsigned kChunk = 1u << 20;
  for (;;) {
    std::size_t used = out.bytes.size();
    out.bytes.resize(used + kChunk);
    int n = gzread(gz.get(), out.bytes.data() + used, kChunk);
    out.bytes.resize(used + static_cast<std::size_t>(n > 0 ? n : 0));
    if (n <= 0) break;
  }
  // gzread reports a truncated stream only through gzerror (as Z_BUF_ERROR).
  int code = Z_OK;
  const char* message = gzerror(gz.get(), &code);
  if (code == Z_BUF_ERROR)
    throw file_error(what, path, "truncated gzip data (unexpected end of file)");
  if (code != Z_OK) throw file_error(what, path, std::string("corrupt gzip data: ") + message);
  return out;
}


std::uint64_t stream_key(std::uint64_t seed, std::uint64_t stream) {
  philox::Block b = philox::philox4x32(stream, 0x5eed'da7aULL, seed);
  return std::uint64_t{b.v[0]} | (std::uint64_t{b.v[1]} << 32);
}

}  // namespace tessera::data_detail
