// Paths into the source tree this build came from: the zoo (models/),
// configs/, the tests' scripts and the benchmarks' peers.
#pragma once

#include <string>

namespace tessera::test {

// The source root, without a trailing slash.
std::string source_dir();

// `relative` under the source root, e.g. source_path("models/mlp.yaml").
std::string source_path(const std::string& relative);

}  // namespace tessera::test
