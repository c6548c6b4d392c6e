// Text from a file, made fit for an error message on a terminal.
#pragma once

#include <string>
#include <string_view>

namespace tessera {

// `text` with every control character (C0, DEL and C1) and every byte that is
// not part of a well-formed UTF-8 character (overlong forms and surrogates
// included) written as \xNN: a damaged file's bytes, echoed by an error
// message, would otherwise reach the terminal raw.
std::string printable(std::string_view text);

// The same, keeping line breaks: for a whole message of several lines.
std::string printable_lines(std::string_view text);

}  // namespace tessera
