// Fuzzes the run-config loader: YAML text to a RunConfig (model, training,
// distribution and data keys, the zoo file a `model:` names), as
// `tessera train FILE` reads it. Nothing is built: sizes are only parsed.
#include "engine/core/error.hpp"
#include "engine/run/run_config.hpp"
#include "tests/fuzz/fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto file = tessera::fuzz::scratch() / "run.yaml";
  tessera::fuzz::write_input(file, data, size);
  try {
    tessera::RunConfig run = tessera::load_run_config(file);
  } catch (const tessera::Error&) {  // the answer to a bad config
  }
  return 0;
}
