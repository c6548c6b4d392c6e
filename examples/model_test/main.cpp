// A user's first test of their own model, with doctest and the installed
// Tessera (<tessera/testing/doctest.hpp>). MY_MODEL is the YAML beside this
// file (examples/CMakeLists.txt defines it).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <tessera/testing/doctest.hpp>

using namespace tessera::testing;

TEST_CASE("my model's gradients are right") { check_gradients(MY_MODEL); }

TEST_CASE("my layout map trains as one device does") {
  check_sharded_run(MY_MODEL);                                     // mesh [1, 2]: tensor parallel
  check_sharded_run(MY_MODEL, {"distribution.mesh.shape=[2, 1]"});  // data parallel
}

TEST_CASE("my model learns") {
  auto history = fit_history(MY_MODEL);
  CHECK(history.back().train.loss < 0.5 * history.front().train.loss);
}
