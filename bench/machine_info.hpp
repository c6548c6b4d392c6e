// Lines of /proc files that describe the machine a benchmark ran on.
#pragma once

#include <algorithm>
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

// The CPU's model name from /proc/cpuinfo ("AMD EPYC"), or "?".
inline std::string cpu_model() {
  std::string line = first_line_of("/proc/cpuinfo", "model name");
  std::size_t colon = line.find(':');
  return colon == std::string::npos ? line : line.substr(std::min(line.size(), colon + 2));
}

}  // namespace tessera::bench
