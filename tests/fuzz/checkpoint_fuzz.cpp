// Fuzzes the checkpoint loader: a good checkpoint of a small store, made once,
// with its model.safetensors replaced by the input, loaded into the store (as
// `--resume` does) and verified (as `tessera verify` does). With
// TESSERA_FUZZ_SEED set to a folder, the good model.safetensors is copied
// there first: the seed that reaches past the header and the checksums.
#include <cstdlib>
#include <cstring>

#include "engine/checkpoint/checkpoint.hpp"
#include "engine/core/error.hpp"
#include "engine/variable_store.hpp"
#include "tests/fuzz/fuzz_input.hpp"

namespace {

using namespace tessera;

// A kernel, a bias and a step counter: the dtypes and ranks a checkpoint holds.
void fill(VariableStore& store) {
  auto values = [](const Tensor& t, std::span<const std::int64_t>) {
    if (t.dtype() == DType::f32)
      for (std::int64_t i = 0; i < t.numel(); ++i) static_cast<float*>(t.raw_data())[i] = 0.25f * static_cast<float>(i);
    else
      std::memset(t.raw_data(), 0, t.nbytes());
  };
  store.get_or_create("m/dense/kernel", Shape({4, 3}), DType::f32, true, {}, values);
  store.get_or_create("m/dense/bias", Shape({3}), DType::f32, true, {}, values);
  store.get_or_create("optimizer/m/dense/kernel/step", Shape({}), DType::i64, false, {}, values);
}

const std::filesystem::path& checkpoint() {
  static const std::filesystem::path dir = [] {
    std::filesystem::path d = fuzz::scratch() / "ckpt";
    VariableStore store;
    fill(store);
    const TrainingState state{
        .step = 3, .epoch = 1, .batch = 0, .seed = 7, .config = {}, .learning_rate_scale = 1, .figures = {},
        .epoch_sums = {}, .callbacks = {}};
    save_checkpoint(d, store, state, "model: {}\n");
    if (const char* seed = std::getenv("TESSERA_FUZZ_SEED")) {
      std::filesystem::create_directories(seed);
      std::filesystem::copy_file(d / "model.safetensors", std::filesystem::path(seed) / "model.safetensors",
                                 std::filesystem::copy_options::overwrite_existing);
    }
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  checkpoint();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::write_input(checkpoint() / "model.safetensors", data, size);
  try {
    VariableStore store;
    fill(store);
    load_checkpoint(checkpoint(), store);
  } catch (const Error&) {  // the answer to a damaged checkpoint
  }
  try {
    verify_checkpoint(checkpoint());
  } catch (const Error&) {
  }
  return 0;
}
