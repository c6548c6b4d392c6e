#include "bin/resume_command.hpp"

#include <algorithm>
#include <cctype>
#include <string_view>

namespace tessera {

std::string shell_word(const std::string& word) {
  const bool plain = !word.empty() && std::all_of(word.begin(), word.end(), [](unsigned char c) {
    return std::isalnum(c) != 0 || std::string_view("_./:=,+-@%").find(static_cast<char>(c)) != std::string_view::npos;
  });
  if (plain) return word;
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string resume_command(const std::vector<std::string>& command_line, const std::string& dir) {
  std::string command;
  for (std::size_t i = 0; i < command_line.size(); ++i) {
    if (i > 0 && command_line[i] == "--resume") {
      ++i;  // and its value
      continue;
    }
    if (i > 0 && command_line[i].rfind("--resume=", 0) == 0) continue;
    command += (command.empty() ? "" : " ") + shell_word(command_line[i]);
  }
  return command + " --resume " + shell_word(dir);
}

}  // namespace tessera
