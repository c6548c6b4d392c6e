// The command that resumes an interrupted `tessera train` (engine/run/interrupt.hpp).
#pragma once

#include <string>
#include <vector>

namespace tessera {

// The shell command that resumes a run started as `tessera` with `arguments`
// (its overrides, --log and all) from the checkpoint in `dir`: the same
// arguments with --resume DIR in place of any --resume they had, quoted for
// a POSIX shell where they need it.
std::string resume_command(const std::vector<std::string>& arguments, const std::string& dir);

}  // namespace tessera
