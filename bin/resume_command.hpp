// The command that resumes an interrupted `tessera train` (engine/run/interrupt.hpp).
#pragma once

#include <string>
#include <vector>

namespace tessera {

// `word` as one word of a POSIX shell command: as it is where it needs no
// quotes, else in single quotes.
std::string shell_word(const std::string& word);

// The shell command that resumes a run started with `command_line` (the
// program as it was invoked, build/tessera say, then its arguments: overrides,
// --log and all) from the checkpoint in `dir`: the same command with
// --resume DIR in place of any --resume it had, quoted where it needs it.
std::string resume_command(const std::vector<std::string>& command_line, const std::string& dir);

}  // namespace tessera
