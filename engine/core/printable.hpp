// Text from a file, made fit for an error message on a terminal.
#pragma once

#include <string>
#include <string_view>

namespace tessera {

// `text` with every control character and every byte that is not part of a
// UTF-8 character written as \xNN: a damaged file's bytes, echoed by an
// error message, would otherwise reach the terminal raw.
std::string printable(std::string_view text);

}  // namespace tessera
