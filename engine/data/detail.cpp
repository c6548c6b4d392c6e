#include "engine/data/detail.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
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

// A file descriptor closed on scope exit; a temporary file also removed unless
// it was renamed into place.
class TempFile {
 public:
  explicit TempFile(std::filesystem::path path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!renamed_) ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  int fd() const { return fd_; }
  const std::filesystem::path& path() const { return path_; }
  int close() {  // 0 or an errno value
    int rc = ::close(fd_);
    fd_ = -1;
    return rc == 0 ? 0 : errno;
  }
  void mark_renamed() { renamed_ = true; }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  bool renamed_ = false;
};

}  // namespace

DataError data_error(std::string_view what, const std::filesystem::path& path,
                     const std::string& message) {
  return DataError(std::string(what) + ": '" + path.string() + "': " + message);
}

FileBytes read_file(const std::filesystem::path& path, std::string_view what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw data_error(what, path, "is a directory");
  std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "rb"));
  if (!file) throw data_error(what, path, "cannot open: " + errno_text(errno));

  FileBytes out;
  std::uint8_t magic[2] = {0, 0};
  std::size_t got = std::fread(magic, 1, 2, file.get());
  out.gzipped = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  if (!out.gzipped) {
    auto size = std::filesystem::file_size(path, ec);
    if (ec) throw data_error(what, path, "cannot read its size: " + ec.message());
    out.bytes.resize(static_cast<std::size_t>(size));
    std::rewind(file.get());
    std::size_t read = std::fread(out.bytes.data(), 1, out.bytes.size(), file.get());
    if (read != out.bytes.size())
      throw data_error(
          what, path,
          "read " + std::to_string(read) + " of " + std::to_string(out.bytes.size()) + " bytes");
    return out;
  }

  file.reset();
  std::unique_ptr<gzFile_s, GzCloser> gz(gzopen(path.c_str(), "rb"));
  if (!gz) throw data_error(what, path, "cannot open: " + errno_text(errno));
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
    throw data_error(what, path, "truncated gzip data (unexpected end of file)");
  if (code != Z_OK) throw data_error(what, path, std::string("corrupt gzip data: ") + message);
  return out;
}

void write_file_atomic(const std::filesystem::path& path, std::span<const ByteRange> parts,
                       std::string_view what) {
  // A name unique to this process and call, so concurrent writers never share one.
  static std::atomic<std::uint64_t> counter{0};
  auto temp_name = path.string() + ".tmp-" + std::to_string(::getpid()) + "-" +
                   std::to_string(counter.fetch_add(1));
  TempFile temp(temp_name);
  if (temp.fd() < 0)
    throw data_error(what, path, "cannot create '" + temp_name + "': " + errno_text(errno));
  for (const ByteRange& part : parts) {
    const auto* p = static_cast<const char*>(part.data);
    std::size_t left = part.size;
    while (left > 0) {
      ssize_t n = ::write(temp.fd(), p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw data_error(what, path, "write failed: " + errno_text(errno));
      p += n;
      left -= static_cast<std::size_t>(n);
    }
  }
  if (::fsync(temp.fd()) != 0) throw data_error(what, path, "fsync failed: " + errno_text(errno));
  if (int error = temp.close(); error != 0)
    throw data_error(what, path, "close failed: " + errno_text(error));
  if (::rename(temp.path().c_str(), path.c_str()) != 0)
    throw data_error(what, path, "cannot rename '" + temp_name + "' over it: " + errno_text(errno));
  temp.mark_renamed();
  // Make the rename itself durable.
  sync_directory(path.parent_path());
}

void sync_directory(const std::filesystem::path& dir) {
  const auto& name = dir.empty() ? std::filesystem::path(".") : dir;
  if (int dir_fd = ::open(name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

std::uint64_t stream_key(std::uint64_t seed, std::uint64_t stream) {
  philox::Block b = philox::philox4x32(stream, 0x5eed'da7aULL, seed);
  return std::uint64_t{b.v[0]} | (std::uint64_t{b.v[1]} << 32);
}

}  // namespace tessera::data_detail
