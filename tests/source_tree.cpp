// The one file of the tests and benchmarks that knows the source tree's path
// (a generated header), so that their other objects compile the same in
// every clone and a ccache serves them all (cmake/TesseraFeatures.cmake).
// The fuzzers, a build of their own, include the header themselves.
#include "tests/source_tree.hpp"

#include "tessera_source_dir.hpp"

namespace tessera::test {

std::string source_dir() { return TESSERA_SOURCE_DIR; }

std::string source_path(const std::string& relative) { return source_dir() + "/" + relative; }

}  // namespace tessera::test
