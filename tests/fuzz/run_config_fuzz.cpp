// Fuzzes the run-config loader: YAML text to a RunConfig (model, training,
// distribution and data keys, the zoo file a `model:` names), as
// `tessera train FILE` reads it. Nothing is built: sizes are only parsed.
#include "engine/core/error.hpp"
#include "engine/run/run_config.hpp"
#include "tests/fuzz/fuzz_input.hpp"
#include "tessera_source_dir.hpp"

namespace {

// The input is written where the repository's configs are, beside a link to
// its zoo, so that a seed's `model: ../models/mlp.yaml` finds the model.
const std::filesystem::path& config_file() {
  static const std::filesystem::path file = [] {
    const auto root = tessera::fuzz::scratch();
    std::filesystem::create_directories(root / "configs");
    std::error_code exists;  // a folder a crashed run of the same pid left keeps its link
    std::filesystem::create_directory_symlink(std::filesystem::path(TESSERA_SOURCE_DIR) / "models", root / "models", exists);
    return root / "configs" / "run.yaml";
  }();
  return file;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto& file = config_file();
  tessera::fuzz::write_input(file, data, size);
  try {
    tessera::RunConfig run = tessera::load_run_config(file);
  } catch (const tessera::Error&) {  // the answer to a bad config
  }
  return 0;
}
