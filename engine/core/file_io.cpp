#include "engine/core/file_io.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <string>
#include <system_error>

#include "engine/core/error.hpp"

namespace tessera {
namespace {

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

DataError file_error(std::string_view what, const std::filesystem::path& path, const std::string& message) {
  return DataError(std::string(what) + ": '" + path.string() + "': " + message);
}

void write_file_atomic(const std::filesystem::path& path, std::span<const ByteRange> parts,
                       std::string_view what) {
  std::size_t i = 0;
  write_file_atomic(
      path,
      [&](ByteRange& part) {
        if (i == parts.size()) return false;
        part = parts[i++];
        return true;
      },
      what);
}

void write_file_atomic(const std::filesystem::path& path, const std::function<bool(ByteRange& part)>& next,
                       std::string_view what) {
  // A name unique to this process and call, so concurrent writers never share one.
  static std::atomic<std::uint64_t> counter{0};
  auto temp_name = path.string() + ".tmp-" + std::to_string(::getpid()) + "-" +
                   std::to_string(counter.fetch_add(1));
  TempFile temp(temp_name);
  if (temp.fd() < 0)
    throw file_error(what, path, "cannot create '" + temp_name + "': " + errno_text(errno));
  for (ByteRange part{nullptr, 0}; next(part);) {
    const auto* p = static_cast<const char*>(part.data);
    std::size_t left = part.size;
    while (left > 0) {
      ssize_t n = ::write(temp.fd(), p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw file_error(what, path, "write failed: " + errno_text(errno));
      p += n;
      left -= static_cast<std::size_t>(n);
    }
  }
  if (::fsync(temp.fd()) != 0) throw file_error(what, path, "fsync failed: " + errno_text(errno));
  if (int error = temp.close(); error != 0)
    throw file_error(what, path, "close failed: " + errno_text(error));
  if (::rename(temp.path().c_str(), path.c_str()) != 0)
    throw file_error(what, path, "cannot rename '" + temp_name + "' over it: " + errno_text(errno));
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

}  // namespace tessera
