// Sharded checkpoints between the devices of several processes, without
// MPI: two threads stand for two processes of a 1x2 mesh, each saving the
// blocks its device holds; a loader then reads only its own device's slices.
#include <doctest/doctest.h>

#include <barrier>
#include <cmath>
#include <limits>
#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>

#include "backends/registry.hpp"
#include "distribution/spmd_program.hpp"
#include "tests/temp_dir.hpp"
#include "tests/test_util.hpp"

namespace tessera {
namespace {

using test::TempDir;

// A store with a [4, 6] kernel, a [6] bias (both split over `model` when bound)
// and a [3] state that no program binds.
void fill(VariableStore& store, bool random) {
  unsigned seed = 1;
  for (const auto& [path, shape_binding] : {std::pair<std::string, Shape>{"m/w", Shape({4, 6})}, {"m/b", Shape({6})},
                                            {"optimizer/m/w/step", Shape({3})}}) {
    const Shape& shape = shape_binding;  // the lambda captures it (Clang 14: not a binding)
    store.get_or_create(path, shape, DType::f32, true, {}, [&](const Tensor& t, std::span<const std::int64_t>) {
      Tensor v = random ? test::random_tensor(shape, seed++) : test::zeros(shape);
      std::memcpy(t.raw_data(), v.raw_data(), v.nbytes());
    });
  }
}

Sharding columns(int rank) {  // the last dimension split over mesh axis 1 (model)
  Sharding s = Sharding::replicated(rank);
  s.dims.back() = 1;
  return s;
}

TEST_CASE("resharding: each process writes its blocks and a device reads only its slices") {
  set_cpu_device_count(2, 1);
  DeviceMesh mesh({1, 2}, {"batch", "model"}, cpu_devices(2));
  VariableStore saved;
  fill(saved, true);
  TempDir dir;
  const auto checkpoint = dir / "ckpt";

  // A killed job's scratch folder of another step: the save removes it.
  std::filesystem::create_directories(dir / "ckpt.tmp-step99");
  std::ofstream(dir / "ckpt.tmp-step99" / "model-00001-of-00002.safetensors") << "half written";

  // Two "processes" save at once, meeting at the save's barriers.
  std::barrier meet(2);
  auto save = [&](int process) {
    ShardedVariables mine(mesh, {process}, saved);
    mine.blocks("m/w", columns(2));
    mine.blocks("m/b", columns(1));
    ShardedSave part = mine.sharded_save(ProcessPlacement{process, 2});
    part.meet = part.barrier = [&] { meet.arrive_and_wait(); };
    const TrainingState state{
        .step = 3, .epoch = 1, .batch = 0, .seed = 0, .config = {}, .learning_rate_scale = 1, .figures = {},
        .epoch_sums = {}, .callbacks = {}};
    save_checkpoint(checkpoint, saved, state, "config", part);
  };
  std::thread other(save, 1);
  save(0);
  other.join();
  for (const char* file : {"model.safetensors.index.json", "model-00001-of-00002.safetensors",
                           "model-00002-of-00002.safetensors", "training_state.json"})
    CHECK(std::filesystem::exists(checkpoint / file));
  CHECK(dir.entries() == std::vector<std::string>{"ckpt"});

  // A whole-tensor load (one device) gets the saved values back.
  VariableStore whole;
  fill(whole, false);
  load_checkpoint(checkpoint, whole);
  for (const auto& v : saved.variables())
    CHECK(whole.find(v.path)->value.to_vector<float>() == v.value.to_vector<float>());

  // A damaged byte of a shard file fails the load, naming the file and the
  // tensor (the blocks carry checksums, checked when a block is read whole).
  {
    const auto second = checkpoint / "model-00002-of-00002.safetensors";
    std::string bytes;
    {
      std::ifstream in(second, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    const std::string good = bytes;
    bytes.back() ^= 0x01;
    std::ofstream(second, std::ios::binary | std::ios::trunc) << bytes;
    VariableStore damaged;
    fill(damaged, false);
    CHECK_THROWS_WITH_AS(load_checkpoint(checkpoint, damaged),
                         doctest::Contains("model-00002-of-00002.safetensors': its bytes do not match the checksum"),
                         CheckpointError);
    std::ofstream(second, std::ios::binary | std::ios::trunc) << good;
  }

  // Device 0 needs only the first file: it loads with the second one gone.
  std::filesystem::remove(checkpoint / "model-00002-of-00002.safetensors");
  VariableStore loaded;
  fill(loaded, false);
  CHECK(load_checkpoint(checkpoint, loaded, LoadValues::none).step == 3);  // checked, nothing read
  CHECK(loaded.find("m/w")->value.to_vector<float>() == std::vector<float>(24, 0.0f));
  ShardedVariables device0(mesh, {0}, loaded);
  const Tensor w0 = device0.blocks("m/w", columns(2))[0];  // made before the source: re-read by read_from
  device0.read_from(checkpoint);
  const std::vector<float> w = saved.find("m/w")->value.to_vector<float>();
  for (std::int64_t r = 0; r < 4; ++r)
    for (std::int64_t c = 0; c < 3; ++c) CHECK(w0.data<float>()[r * 3 + c] == w[static_cast<std::size_t>(r * 6 + c)]);
  const Tensor b0 = device0.blocks("m/b", columns(1))[0];  // made after: read from the checkpoint
  const std::vector<float> b = saved.find("m/b")->value.to_vector<float>();
  CHECK(b0.to_vector<float>() == std::vector<float>(b.begin(), b.begin() + 3));
  // The state no program holds comes whole from the checkpoint when the store is written.
  device0.write_back(job_processes(), std::chrono::seconds(1));
  CHECK(loaded.find("optimizer/m/w/step")->value.to_vector<float>() ==
        saved.find("optimizer/m/w/step")->value.to_vector<float>());

  // Device 1's slices are in the missing file: its load fails naming it.
  ShardedVariables device1(mesh, {1}, loaded);
  device1.read_from(checkpoint);
  CHECK_THROWS_WITH_AS(device1.blocks("m/w", columns(2)), doctest::Contains("model-00002-of-00002.safetensors"),
                       CheckpointError);
  set_cpu_device_count(1);
}

TEST_CASE("resharding: a block holding NaN or infinities is refused unless allowed") {
  set_cpu_device_count(2, 1);
  DeviceMesh mesh({1, 2}, {"batch", "model"}, cpu_devices(2));
  VariableStore saved;
  fill(saved, true);
  static_cast<float*>(saved.find("m/w")->value.raw_data())[3 * 6 + 5] = std::numeric_limits<float>::quiet_NaN();
  static_cast<float*>(saved.find("optimizer/m/w/step")->value.raw_data())[1] = std::numeric_limits<float>::infinity();
  TempDir dir;
  save_checkpoint(dir / "ckpt", saved, TrainingState{}, "config");

  VariableStore loaded;
  fill(loaded, false);
  ShardedVariables device0(mesh, {0}, loaded), device1(mesh, {1}, loaded);
  device0.read_from(dir / "ckpt");
  device1.read_from(dir / "ckpt");
  CHECK_NOTHROW(device0.blocks("m/w", columns(2)));  // columns 0:3 are finite
  CHECK_THROWS_WITH_AS(device1.blocks("m/w", columns(2)),
                       doctest::Contains("block [0:4, 3:6] of tensor 'm/w': 1 of 12 values are NaN or infinite "
                                         "(the first at element 11)"),
                       CheckpointError);
  // State no program holds is read whole when the store is written back.
  CHECK_THROWS_WITH_AS(device0.write_back(job_processes(), std::chrono::seconds(1)),
                       doctest::Contains("tensor 'optimizer/m/w/step': 1 of 3 values"), CheckpointError);

  // Blocks held when the load is refused keep their values, also those of a
  // variable read before the one refused ("m/b" comes before "m/w"), and the
  // refused checkpoint is not the source of blocks made later.
  VariableStore zeros;
  fill(zeros, false);
  ShardedVariables held(mesh, {1}, zeros);
  const Tensor b1 = held.blocks("m/b", columns(1))[0];
  const Tensor w1 = held.blocks("m/w", columns(2))[0];
  CHECK_THROWS_WITH_AS(held.read_from(dir / "ckpt"), doctest::Contains("block [0:4, 3:6] of tensor 'm/w'"), CheckpointError);
  CHECK(b1.to_vector<float>() == std::vector<float>(3, 0.0f));  // the checkpoint's are random
  CHECK(w1.to_vector<float>() == std::vector<float>(12, 0.0f));
  CHECK_NOTHROW(held.write_back(job_processes(), std::chrono::seconds(1)));  // no source: the state stays the store's
  CHECK(zeros.find("optimizer/m/w/step")->value.to_vector<float>() == std::vector<float>(3, 0.0f));

  ShardedVariables allowed(mesh, {1}, loaded);
  allowed.read_from(dir / "ckpt", NonFinite::allow);
  CHECK(std::isnan(allowed.blocks("m/w", columns(2))[0].data<float>()[11]));
  set_cpu_device_count(1);
}

}  // namespace
}  // namespace tessera
