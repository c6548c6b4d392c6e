// Lines of /proc files that describe the machine a benchmark ran on.
#pragma once

#include <fstream>
#include <string>

namespace tessera::bench {

// The first line of `path` starting with `prefix` ("model name" of
// /proc/cpuinfo), or the first line; "?" when there is none.
inline std::string first_line_of(const char* path, const std::string& prefix = "") {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (prefix.empty() || line.rfind(prefix, 0) == 0) return line;
  return "?";
}

}  // namespace tessera::bench
