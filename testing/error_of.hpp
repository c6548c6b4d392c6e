// error_of(f): the message of the error `f` throws, for checking what a user
// is told (part of <tessera/testing/doctest.hpp>; the engine's own tests use it too).
//
//   CHECK(error_of([] { load_run_config("bad.yaml"); }).find("bad.yaml:3:5:") == 0);
#pragma once

#include <string>

#include "engine/core/error.hpp"

namespace tessera::testing {

// The message of the `E` that `f` throws, or "no error" (which then fails
// the caller's check of the message).
template <typename E = Error, typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace tessera::testing
