// The one file that knows the source tree's path (a generated header), so
// that the other objects of the tests and benchmarks compile the same in every clone and a
// ccache serves them all (cmake/TesseraFeatures.cmake).
#include "tests/source_tree.hpp"

#include "tessera_source_dir.hpp"

namespace tessera::test {

std::string source_dir() { return TESSERA_SOURCE_DIR; }

std::string source_path(const std::string& relative) { return source_dir() + "/" + relative; }

}  // namespace tessera::test
