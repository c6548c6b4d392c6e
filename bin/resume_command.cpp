#include "bin/resume_command.hpp"

#include <algorithm>
#include <cctype>
#include <string_view>

namespace tessera {

std::string resume_command(const std::vector<std::string>& arguments, const std::string& dir) {
  auto quoted = [](const std::string& word) {
    const bool plain = !word.empty() && std::all_of(word.begin(), word.end(), [](unsigned char c) {
      return std::isalnum(c) != 0 || std::string_view("_./:=,+-@%").find(static_cast<char>(c)) != std::string_view::npos;
    });
    if (plain) return word;
    std::string out = "'";
    for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
  };
  std::string command = "tessera";
  for (std::size_t i = 0; i < arguments.size(); ++i) {
    if (arguments[i] == "--resume") {
      ++i;  // and its value
      continue;
    }
    if (arguments[i].rfind("--resume=", 0) == 0) continue;
    command += " " + quoted(arguments[i]);
  }
  return command + " --resume " + quoted(dir);
}

}  // namespace tessera
