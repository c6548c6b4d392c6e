// The cost model's predicted collective bytes equal what the communicator
// measures, exactly, for the zoo's models on several meshes and layouts
// (the prediction reads the same per-device graph the devices run).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>
#include <tuple>
#include <fstream>
#include <sstream>

#include "backends/registry.hpp"
#include "distribution/auto_tp.hpp"
#include "distribution/calibration_cache.hpp"
#include "distribution/collectives/process_group.hpp"
#include "distribution/cost_model.hpp"
#include "distribution/strategies.hpp"
#include "engine/config/config.hpp"
#include "engine/run/auto_choice.hpp"
#include "engine/run/run_config.hpp"
#include "engine/run/trainer.hpp"
#include "tests/classifier.hpp"
#include "tests/temp_dir.hpp"
#include "tests/test_util.hpp"
#include "tests/source_tree.hpp"

using namespace tessera;

namespace {

// Runs two steps of `file` on a [batch, model] mesh with `strategy`; returns
// (predicted, measured) bus bytes per step and device.
std::pair<std::map<std::string, std::int64_t>, std::map<std::string, std::int64_t>> bytes_of_a_step(
    Model model, std::int64_t batch_devices, std::int64_t model_devices, Strategy strategy, const Tensor& inputs,
    const Tensor& targets) {
  const int devices = static_cast<int>(batch_devices * model_devices);
  TrainingSpec spec = parse_training(ConfigNode::parse(
      "training: {loss: {type: sparse_categorical_crossentropy, from_logits: true}, optimizer: adam, batch_size: " +
      std::to_string(inputs.shape()[0]) + "}")["training"]);
  DeviceMesh mesh({batch_devices, model_devices}, {"batch", "model"}, cpu_devices(devices));
  VariableStore store;
  model.build(store, 0);
  std::unique_ptr<Distribution> distribution = make_strategy(strategy, mesh, model, store);
  Trainer trainer(model, spec, store, *distribution);
  Calibration calibration{100, 10, 10, 1, 2};  // speeds do not matter for bytes
  auto predicted = predict_step(*trainer.sharded_program(inputs.shape()[0]), calibration, 1).collective_bytes;
  for (int i = 0; i < 2; ++i) trainer.train_step(inputs, targets);
  std::map<std::string, std::int64_t> measured;
  for (const auto& [key, stats] : trainer.communicator()->accounting().total())
    if (stats.bytes > 0) measured[std::string(name(key.first)) + " " + key.second] = stats.bytes / 2 / devices;
  std::erase_if(predicted, [](const auto& entry) { return entry.second == 0; });
  return {predicted, measured};
}

Tensor labels(const Shape& shape, std::int32_t below) {
  Tensor t = Tensor::empty(shape, DType::i32);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<std::int32_t>()[i] = static_cast<std::int32_t>(i * 7 % below);
  return t;
}

}  // namespace

TEST_CASE("predicted collective bytes equal measured bytes: MLP, CNN and GPT") {
  set_cpu_device_count(8, 1);
  struct Case {
    std::string file;
    std::vector<std::string> overrides;
    Tensor inputs, targets;
  };
  // The GPT at a context of 32: the same collectives as at 128, on a quarter of the tokens.
  const std::vector<Case> cases = {
      {"mlp.yaml", {}, test::random_tensor({16, 784}, 1), labels({16}, 10)},
      {"cnn.yaml", {}, test::random_tensor({8, 28, 28, 1}, 2), labels({8}, 10)},
      {"gpt.yaml", test::gpt_context(32), labels({8, 32}, 256), labels({8, 32}, 256)},
  };
  for (const auto& c : cases)
    for (const auto& mesh : std::vector<std::tuple<std::int64_t, std::int64_t, Strategy>>{
             {2, 4, Strategy::tp}, {4, 2, Strategy::tp}, {1, 8, Strategy::tp}, {8, 1, Strategy::dp},
             {4, 2, Strategy::zero}, {8, 1, Strategy::fsdp}}) {
      const std::int64_t batch = std::get<0>(mesh), model = std::get<1>(mesh);
      const Strategy strategy = std::get<2>(mesh);
      INFO(c.file << " on " << batch << "x" << model << " " << name(strategy));
      auto [predicted, measured] =
          bytes_of_a_step(test::zoo_model(c.file, c.overrides), batch, model, strategy, c.inputs, c.targets);
      CHECK(!measured.empty());
      CHECK(predicted == measured);
    }
  set_cpu_device_count(1);
}

TEST_CASE("the FLOPs the op rules count are the reference models' training FLOPs") {
  // shared/REFERENCE_MODELS.md's matmul FLOPs of a training step (forward
  // and backward, no gradient for the inputs), which bench_models divides by
  // its step times: counted here from the graph itself, split over two devices.
  // The GPT's attention op recomputes its scores in the backward (FlashAttention's
  // way): one more product a layer, 2 x 8 x 4 x 128 x 128 x 64 FLOPs each of its 4.
  set_cpu_device_count(2, 1);
  struct Case {
    std::string file;
    Tensor inputs, targets;
    double gflop;
  };
  const std::vector<Case> cases = {
      {"mlp.yaml", test::random_tensor({128, 784}, 1), labels({128}, 10), 1.2242},
      {"cnn.yaml", test::random_tensor({64, 28, 28, 1}, 2), labels({64}, 10), 4.5802},
      {"gpt.yaml", labels({8, 128}, 256), labels({8, 128}, 256), 21.34 + 4 * 2 * 8 * 4 * 128 * 128 * 64 / 1e9},
  };
  for (const auto& c : cases) {
    INFO(c.file);
    Model model = Model::from_config(ConfigNode::load_file(test::source_path("models/" + c.file))["model"]);
    TrainingSpec spec = parse_training(ConfigNode::parse(
        "training: {loss: {type: sparse_categorical_crossentropy, from_logits: true}, optimizer: adam, batch_size: " +
        std::to_string(c.inputs.shape()[0]) + "}")["training"]);
    VariableStore store;
    DataParallel distribution(DeviceMesh({2}, {"batch"}, cpu_devices(2)));
    Trainer trainer(model, spec, store, distribution);
    const StepCost cost = predict_step(*trainer.sharded_program(c.inputs.shape()[0]), Calibration{100, 10, 10, 1, 2}, 1);
    CHECK(2.0 * static_cast<double>(cost.flops) / 1e9 == doctest::Approx(c.gflop).epsilon(5e-4));
  }
  set_cpu_device_count(1);
}

TEST_CASE("the probe measures positive speeds") {
  Calibration c = measure_calibration();
  CHECK(c.matmul_gflops_per_thread > 0);
  CHECK(c.memory_gbps_per_thread > 0);
  CHECK(c.link_gbps > 0);
  CHECK(c.collective_latency_us > 0);
  CHECK(c.cores >= 1);
}

TEST_CASE("type auto: every mesh and strategy is a candidate and the fastest within the budget wins") {
  set_cpu_device_count(4, 1);
  Model model = Model::from_config(ConfigNode::load_file(test::source_path("models/mlp.yaml"))["model"]);
  TrainingSpec spec = parse_training(ConfigNode::parse(
      "training: {loss: {type: sparse_categorical_crossentropy, from_logits: true}, optimizer: adam, batch_size: 16}")["training"]);
  const Calibration calibration{100, 10, 10, 1, 2};
  AutoChoice free = choose_auto(model, spec, cpu_devices(4), calibration, 0);
  // 1x4, 2x2, 4x1 x dp, zero, tp, fsdp, each once.
  std::set<std::tuple<std::int64_t, std::int64_t, Strategy>> seen, all;
  for (const auto& c : free.candidates) seen.emplace(c.batch_devices, c.model_devices, c.strategy);
  for (std::int64_t b : {1, 2, 4})
    for (Strategy s : kStrategies) all.emplace(b, 4 / b, s);
  CHECK(free.candidates.size() == all.size());
  CHECK(seen == all);
  // A batch of 6 divides over 1 or 2 devices of the batch axis, not 4: 4x1 is no candidate.
  spec.batch_size = 6;
  for (const auto& c : choose_auto(model, spec, cpu_devices(4), calibration, 0).candidates) CHECK(c.batch_devices != 4);
  spec.batch_size = 16;
  REQUIRE(free.chosen);
  for (const auto& c : free.candidates) CHECK(free.candidates[*free.chosen].predicted_seconds <= c.predicted_seconds);
  // Replicated strategies hold every parameter and its Adam moments (3 x 7.1 MiB): a budget
  // below that leaves only sharded candidates.
  std::int64_t least = free.candidates[0].memory_bytes, most = least;
  for (const auto& c : free.candidates) least = std::min(least, c.memory_bytes), most = std::max(most, c.memory_bytes);
  REQUIRE(least < most);
  AutoChoice tight = choose_auto(model, spec, cpu_devices(4), calibration, least);
  REQUIRE(tight.chosen);
  CHECK(tight.candidates[*tight.chosen].memory_bytes <= least);
  CHECK_FALSE(choose_auto(model, spec, cpu_devices(4), calibration, least - 1).chosen);
  set_cpu_device_count(1);
}

TEST_CASE("type auto runs the strategy it chose: ZeRO-1 splits the optimizer state") {
  RunConfig run = load_run_config(test::source_path("configs/tiny_synthetic.yaml"),
                                  {"distribution={devices: cpu:2, type: auto}"});
  AutoChoice choice;  // as if the cost model had picked ZeRO-1 on 2x1
  choice.candidates.push_back({.batch_devices = 2, .model_devices = 1, .strategy = Strategy::zero});
  choice.chosen = 0;
  run.distribution->auto_choice = choice;
  VariableStore store;
  auto trainer = make_trainer(run, store);
  CHECK(run.distribution->distribution->zero());
}

namespace {

// A job whose process 0 chose candidate `choice`: what broadcast_from_first
// hands every other process.
struct FirstProcessChose final : ProcessGroup {
  std::int64_t choice = 0;
  int broadcasts = 0;
  ProcessPlacement placement() const override { return {}; }
  void sum(std::span<double>, std::chrono::milliseconds) override {}
  void merge(std::span<std::byte>, std::chrono::milliseconds) override {}
  void barrier(std::chrono::milliseconds) override {}
  void broadcast_from_first(std::span<std::byte> bytes, std::chrono::milliseconds) override {
    ++broadcasts;
    REQUIRE(bytes.size() == sizeof choice);
    std::memcpy(bytes.data(), &choice, sizeof choice);
  }
};

}  // namespace

TEST_CASE("type auto follows the choice of the job's first process, through the process group it is given") {
  RunConfig run = load_run_config(test::source_path("configs/tiny_synthetic.yaml"),
                                  {"distribution={devices: cpu:2, type: auto}"});
  FirstProcessChose job;
  job.choice = 5;  // meshes 1x2 then 2x1, strategies dp, zero, tp, fsdp each: 2x1 ZeRO-1
  VariableStore store;
  auto trainer = make_trainer(run, store, job);
  CHECK(job.broadcasts == 1);
  REQUIRE(run.distribution->auto_choice->chosen == std::optional<std::size_t>(5));
  const AutoCandidate& c = run.distribution->auto_choice->candidates[5];
  CHECK((c.batch_devices == 2 && c.model_devices == 1 && c.strategy == Strategy::zero));
  CHECK(run.distribution->distribution->zero());
  CHECK(run.distribution->distribution->mesh().shape() == std::vector<std::int64_t>{2, 1});
  set_cpu_device_count(1);
}

TEST_CASE("a damaged calibration cache is measured again") {
  test::TempDir dir;
  const char* old = std::getenv("XDG_CACHE_HOME");
  const std::string saved = old ? old : "";
  ::setenv("XDG_CACHE_HOME", dir.path().c_str(), 1);
  const Calibration measured = cached_calibration();  // no cache yet: a probe, saved
  const auto file = dir / "tessera" / "calibration.txt";
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  in.close();
  std::string damaged = text.str();
  const auto at = damaged.find("link_gbps ");
  REQUIRE(at != std::string::npos);
  damaged.replace(at, damaged.find('\n', at) - at, "link_gbps 0");
  std::ofstream(file) << damaged;
  const Calibration again = cached_calibration();
  CHECK(again.link_gbps > 0);
  CHECK(std::isfinite(again.link_gbps));
  CHECK(measured.link_gbps > 0);
  if (old) ::setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  else ::unsetenv("XDG_CACHE_HOME");
}
