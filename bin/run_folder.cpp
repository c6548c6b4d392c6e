#include "bin/run_folder.hpp"

#include <unistd.h>

#include <array>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <system_error>


namespace tessera {
namespace {

namespace fs = std::filesystem;

// The run numbers taken in `parent` (folders named by a positive number).
std::int64_t highest_run_number(const fs::path& parent) {
  std::int64_t highest = 0;
  std::error_code ec;
  for (fs::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::int64_t n = 0;
    auto [rest, err] = std::from_chars(name.data(), name.data() + name.size(), n);
    if (err == std::errc() && rest == name.data() + name.size() && n > highest) highest = n;
  }
  return highest;
}

}  // namespace

fs::path next_run_folder(const std::string& config_file, ProcessGroup& processes) {
  const fs::path parent = fs::path("runs") / fs::path(config_file).stem();
  std::int64_t n = 0;
  if (processes.placement().process == 0) {
    // Made here, so that two runs started at once never share a folder.
    std::error_code ec;
    fs::create_directories(parent, ec);
    n = highest_run_number(parent) + 1;
    while (!fs::create_directory(parent / std::to_string(n), ec) && !ec) ++n;
  }
  if (processes.placement().multi_process()) {
    std::array<std::byte, sizeof n> bytes;
    std::memcpy(bytes.data(), &n, sizeof n);
    processes.broadcast_from_first(bytes, std::chrono::minutes(5));
    std::memcpy(&n, bytes.data(), sizeof n);
  }
  return parent / std::to_string(n);
}

std::string link_latest_run(const fs::path& run, ProcessGroup& processes) {
  if (processes.placement().process != 0) return "";
  const fs::path latest = run.parent_path() / "latest";
  const fs::path temp = run.parent_path() / (".latest-" + std::to_string(::getpid()));
  std::error_code ec;
  fs::remove(temp, ec);
  fs::create_directory_symlink(run.filename(), temp, ec);  // relative: the runs folder may move
  if (!ec) fs::rename(temp, latest, ec);
  if (!ec) return "";
  std::string why = "cannot point '" + latest.string() + "' at '" + run.string() + "': " + ec.message();
  fs::remove(temp, ec);
  return why;
}

}  // namespace tessera
