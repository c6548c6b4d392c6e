// What the tessera program says when its command line is wrong: the command
// a misspelt one was probably meant to be, and where an option that does not
// exist belongs (most are config keys, set with --set).
#pragma once

#include <string>
#include <vector>

namespace tessera {

// The command of `commands` closest to `typed` (at most two edits away, as
// "trian" from "train"); empty when none is that close.
std::string closest_command(const std::string& typed, const std::vector<std::string>& commands);

// A hint for `--name value` that the command does not take: the config key
// it means, as `--set training.epochs=1`; empty when it is not an option.
std::string unexpected_option_hint(const std::string& name, const std::string& value);

}  // namespace tessera
