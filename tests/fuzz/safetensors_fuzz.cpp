// Fuzzes the safetensors reader: a file's header alone, then the whole file.
#include "engine/checkpoint/safetensors.hpp"
#include "engine/core/error.hpp"
#include "tests/fuzz/fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto file = tessera::fuzz::scratch() / "t.safetensors";
  tessera::fuzz::write_input(file, data, size);
  try {
    tessera::read_safetensors_header(file);
    tessera::load_safetensors(file);
  } catch (const tessera::Error&) {  // the answer to a bad file
  }
  return 0;
}
