// Runs whose variables live as device copies (the path a GPU takes: batches
// and outputs staged, the store written back on sync_store and before each
// save), on one device and on a mesh: CPU devices asked to keep their own
// copies against the runs over host tensors, and GPUs where there are some;
// and the `device:` setting.
#include <doctest/doctest.h>

#include <cstring>
#include <fstream>

#include "backends/registry.hpp"
#include "distribution/distribution.hpp"
#include "engine/config/config.hpp"
#include "engine/data/synthetic.hpp"
#include "engine/run/run_config.hpp"
#include "engine/run/step_host.hpp"
#include "engine/run/trainer.hpp"
#include "tests/gpu_test_util.hpp"
#include "tests/classifier.hpp"
#include "tests/temp_dir.hpp"
#include "tessera_features.hpp"
#include "tests/source_tree.hpp"

using namespace tessera;
using tessera::test::classifier;

namespace {

TrainingSpec spec(const std::filesystem::path& checkpoint = {}) {
  TrainingSpec s = parse_training(ConfigNode::parse(
      "training: {loss: {type: sparse_categorical_crossentropy, from_logits: true}, optimizer: {type: adam, "
      "learning_rate: 0.01}, metrics: [accuracy], epochs: 2, batch_size: 16, seed: 3}")["training"]);
  s.checkpoint.dir = checkpoint;
  return s;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// Every variable of `a` (model and optimizer state) equals `b`'s, bit for bit.
bool same_store(const VariableStore& a, VariableStore& b) {
  if (a.variables().size() != b.variables().size()) return false;
  for (const auto& v : a.variables())
    if (!b.find(v.path) || !same_bytes(v.value, b.find(v.path)->value)) return false;
  return true;
}

// fit, predict and evaluate give `direct` and `copied` the same figures, and
// their stores the same values (fit ends with sync_store), bit for bit.
void check_same_fit(Trainer& direct, VariableStore& direct_store, Trainer& copied, VariableStore& copied_store,
                    const Dataset& data) {
  const auto logs_direct = direct.fit(data, &data), logs_copied = copied.fit(data, &data);
  REQUIRE(logs_direct.size() == logs_copied.size());
  for (std::size_t e = 0; e < logs_direct.size(); ++e) {
    CHECK(logs_direct[e].train.loss == logs_copied[e].train.loss);
    CHECK(logs_direct[e].validation.loss == logs_copied[e].validation.loss);
    CHECK(logs_direct[e].validation.metrics == logs_copied[e].validation.metrics);
  }
  CHECK(same_store(direct_store, copied_store));
  CHECK(same_bytes(direct.predict(data.inputs), copied.predict(data.inputs)));
  CHECK(direct.evaluate(data).loss == copied.evaluate(data).loss);
}

}  // namespace

TEST_CASE("device-resident variables: fit, evaluate and predict equal the run over the store, bit for bit") {
  const Model model = classifier();
  const Dataset data = synthetic_classification(200, {8}, 3, 1);  // a partial last batch too
  VariableStore direct_store, copied_store;
  Trainer direct(model, spec(), direct_store);
  Trainer copied(model, spec(), copied_store, device_host(copied_store, Device::cpu(), Residency::device));

  // One step: the copies moved, the store did not, until sync_store.
  const Tensor x = data.inputs.rows(0, 16), y = data.targets.rows(0, 16);
  const Evaluation a = direct.train_step(x, y), b = copied.train_step(x, y);
  CHECK(a.loss == b.loss);
  VariableStore initial;
  model.build(initial, 3);
  const Variable& kernel = *copied_store.find(direct_store.variables().front().path);
  CHECK(same_bytes(kernel.value, initial.find(kernel.path)->value));
  CHECK_FALSE(same_bytes(kernel.value, direct_store.find(kernel.path)->value));
  copied.sync_store();
  CHECK(same_store(direct_store, copied_store));

  check_same_fit(direct, direct_store, copied, copied_store, data);
}

TEST_CASE("device-resident variables: a save writes the device's values, a load reaches the device") {
  const Model model = classifier();
  const Dataset data = synthetic_classification(64, {8}, 3, 1);
  test::TempDir dir;
  VariableStore store;
  Trainer trainer(model, spec(dir / "ckpt"), store, device_host(store, Device::cpu(), Residency::device));
  trainer.fit(data, nullptr);  // saves after epochs 1 and 2

  VariableStore loaded;
  Trainer reader(model, spec(), loaded, device_host(loaded, Device::cpu(), Residency::device));
  reader.train_step(data.inputs.rows(0, 16), data.targets.rows(0, 16));  // the copies exist, then the load replaces them
  reader.resume(reader.load(dir / "ckpt"));
  reader.sync_store();
  CHECK(same_store(store, loaded));  // the checkpoint's values came back from the device copies
  CHECK(same_bytes(trainer.predict(data.inputs), reader.predict(data.inputs)));
}

namespace {

// A 2x2 mesh of logical CPU devices, the first Dense layer split column-wise
// over "model" and the batch over "batch": every block copy and collective of
// the model-parallel path.
struct MeshCase {
  DeviceMesh mesh{{2, 2}, {"batch", "model"}, cpu_devices(4)};
  LayoutMap map;
  std::unique_ptr<Distribution> distribution;
  MeshCase() {
    map.add("dense/kernel", TensorLayout({std::nullopt, "model"}));
    map.add("dense/bias", TensorLayout({"model"}));
    distribution = std::make_unique<ModelParallel>(mesh, map, "batch");
  }
};

}  // namespace

TEST_CASE("device-resident blocks of a mesh: fit, evaluate and predict equal the mesh over host blocks, bit for bit") {
  set_cpu_device_count(4, 1);
  const Model model = classifier();
  const Dataset data = synthetic_classification(200, {8}, 3, 1);
  MeshCase c;
  VariableStore direct_store, copied_store;
  Trainer direct(model, spec(), direct_store, *c.distribution);
  Trainer copied(model, spec(), copied_store,
                 mesh_host(copied_store, *c.distribution, job_processes(), Residency::device));

  const Tensor x = data.inputs.rows(0, 16), y = data.targets.rows(0, 16);
  CHECK(direct.train_step(x, y).loss == copied.train_step(x, y).loss);
  VariableStore initial;
  model.build(initial, 3);
  for (const auto& v : initial.variables())  // the device copies moved, the store did not
    CHECK(same_bytes(v.value, copied_store.find(v.path)->value));
  copied.sync_store();
  direct.sync_store();
  CHECK(same_store(direct_store, copied_store));

  check_same_fit(direct, direct_store, copied, copied_store, data);
  set_cpu_device_count(1);
}

TEST_CASE("device-resident blocks of a mesh: a save writes the devices' values, a load reaches the devices") {
  set_cpu_device_count(4, 1);
  const Model model = classifier();
  const Dataset data = synthetic_classification(64, {8}, 3, 1);
  MeshCase c;
  test::TempDir dir;
  VariableStore store;
  Trainer trainer(model, spec(dir / "ckpt"), store, mesh_host(store, *c.distribution, job_processes(), Residency::device));
  trainer.fit(data, nullptr);

  VariableStore loaded;
  Trainer reader(model, spec(), loaded, mesh_host(loaded, *c.distribution, job_processes(), Residency::device));
  reader.train_step(data.inputs.rows(0, 16), data.targets.rows(0, 16));  // the blocks exist, then the load replaces them
  reader.resume(reader.load(dir / "ckpt"));
  reader.sync_store();
  CHECK(same_store(store, loaded));
  CHECK(same_bytes(trainer.predict(data.inputs), reader.predict(data.inputs)));
  set_cpu_device_count(1);
}

TEST_CASE("device: picks the one device of a run, checked at its key") {
  const std::string config = test::source_path("configs/tiny_synthetic.yaml");
  CHECK(load_run_config(config, {"distribution=null", "device=cpu"}).device == Device::cpu());
  CHECK(load_run_config(config, {"distribution=null", "device=cpu:0"}).device == Device::cpu());
  CHECK_THROWS_WITH_AS(load_run_config(config, {"distribution=null", "device=cpu:1"}),
                       doctest::Contains("a run on one device runs on cpu:0"), ConfigError);
  CHECK_THROWS_WITH_AS(load_run_config(config, {"distribution=null", "device=tpu:0"}),
                       doctest::Contains("tpu:0"), ConfigError);
  CHECK_THROWS_WITH_AS(load_run_config(config, {"distribution={devices: cpu:2, type: data_parallel}", "device=cpu"}),
                       doctest::Contains("whose mesh names its devices in distribution.devices"), ConfigError);
  // Written in a file, the error names its line and column.
  test::TempDir dir;
  std::ofstream(dir / "run.yaml") << "model: " << test::source_path("models/mlp.yaml") << "\ndevice: cpu:2\n";
  CHECK_THROWS_WITH_AS(load_run_config(dir / "run.yaml"), doctest::Contains("run.yaml:2:9"), ConfigError);
  if (cuda_device_count() == 0)
    CHECK_THROWS_WITH_AS(load_run_config(config, {"distribution=null", "device=cuda:0"}), doctest::Contains("'cuda:0': "),
                         ConfigError);
}

TEST_CASE("a run on cuda:0 trains to the CPU run's losses and weights" * doctest::test_suite("gpu") *
          test::skip_without_gpu()) {
  const Model model = classifier();
  const Dataset data = synthetic_classification(200, {8}, 3, 1);
  VariableStore cpu_store, gpu_store;
  Trainer on_cpu(model, spec(), cpu_store), on_gpu(model, spec(), gpu_store, Device::cuda(0));
  const auto cpu_logs = on_cpu.fit(data, &data), gpu_logs = on_gpu.fit(data, &data);
  for (std::size_t e = 0; e < cpu_logs.size(); ++e)
    CHECK(gpu_logs[e].train.loss == doctest::Approx(cpu_logs[e].train.loss).epsilon(1e-4));
  for (const auto& v : cpu_store.variables()) {
    const Tensor& g = gpu_store.find(v.path)->value;
    REQUIRE(g.device() == Device::cpu());  // the store stays on the host; the GPU held copies
    const auto a = v.value.to_vector<float>(), b = g.to_vector<float>();
    for (std::size_t i = 0; i < a.size(); ++i) CHECK(b[i] == doctest::Approx(a[i]).epsilon(1e-3).scale(1e-3));
  }
}

TEST_CASE("a mesh of every GPU trains to one device's losses and weights (NCCL)" * doctest::test_suite("gpu") *
          test::skip_without_gpu()) {
  if (!TESSERA_HAVE_NCCL || cuda_device_count() < 2) {
    MESSAGE("skipped: needs NCCL and two GPUs (this machine: " << cuda_device_count() << ")");
    return;
  }
  const Model model = classifier();
  const Dataset data = synthetic_classification(200, {8}, 3, 1);
  DeviceMesh mesh({2, 1}, {"batch", "model"}, {Device::cuda(0), Device::cuda(1)});
  DataParallel distribution(mesh);
  VariableStore one_store, mesh_store;
  Trainer one(model, spec(), one_store), on_gpus(model, spec(), mesh_store, distribution);
  const auto one_logs = one.fit(data, &data), mesh_logs = on_gpus.fit(data, &data);
  for (std::size_t e = 0; e < one_logs.size(); ++e)
    CHECK(mesh_logs[e].train.loss == doctest::Approx(one_logs[e].train.loss).epsilon(1e-4));
  for (const auto& v : one_store.variables()) {
    const auto a = v.value.to_vector<float>(), b = mesh_store.find(v.path)->value.to_vector<float>();
    for (std::size_t i = 0; i < a.size(); ++i) CHECK(b[i] == doctest::Approx(a[i]).epsilon(1e-3).scale(1e-3));
  }
}
