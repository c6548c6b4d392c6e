// Fuzzes the .npy and .npz readers (the `predict --input` and `data: {type:
// npz}` files): the input read as an array, then as an archive of arrays.
#include "engine/core/error.hpp"
#include "engine/data/npy.hpp"
#include "tests/fuzz/fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto npy = tessera::fuzz::scratch() / "x.npy", npz = tessera::fuzz::scratch() / "x.npz";
  tessera::fuzz::write_input(npy, data, size);
  tessera::fuzz::write_input(npz, data, size);
  try {
    tessera::load_npy(npy);
  } catch (const tessera::Error&) {  // the answer to a bad file
  }
  try {
    for (const std::string& name : tessera::npz_names(npz)) tessera::load_npz(npz, name);
  } catch (const tessera::Error&) {
  }
  return 0;
}
