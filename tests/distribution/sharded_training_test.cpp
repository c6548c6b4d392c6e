// The equivalence matrix: the zoo's MLP, CNN and GPT, trained for three steps
// on the meshes 1x1, 2x1, 1x2, 2x2, 4x2, 2x4, 1x8 and 8x1 of cpu:8 (1x4 and
// 4x1 run in tests/cli/mpi_test.sh) with data-parallel, Megatron-style
// (column- then row-parallel) and fully sharded layouts, give the
// single-device run's losses, metrics and weights.
//
// Tolerance: sharded runs add partial sums in another order, so results
// differ by float rounding only: losses within 1e-5 relative, weights (after
// three SGD steps with momentum) within 2e-5 absolute plus 1e-4 relative.
// Metrics are counts of hits, exact in any order; but a GPT batch has 256
// rows of 256 scores, where rounding may swap two nearly equal scores: one
// such flip per step is allowed there.
// The GPT is the zoo's with a context of 32 tokens instead of 128: every
// layer and layout is the same, at a quarter of the time (CI runs this file
// three times, once under sanitizers).
// Adam is checked apart, with weights within 2e-4: it divides each gradient
// element by its own magnitude, so an element whose gradient is a nearly
// cancelling sum (|g| near epsilon) turns the other summation order's
// rounding into a visibly different step.
//
// With TESSERA_TEST_MESH_DEVICES=cuda the meshes are logical devices of GPU 0
// and the one-device run is cuda:0's (tests/mesh_devices.hpp).
#include <doctest/doctest.h>

#include <cmath>
#include <functional>

#include "backends/registry.hpp"
#include "distribution/auto_tp.hpp"
#include "distribution/distribution.hpp"
#include "distribution/spmd_program.hpp"
#include "engine/config/config.hpp"
#include "engine/run/trainer.hpp"
#include "tests/classifier.hpp"
#include "tests/mesh_devices.hpp"
#include "tests/test_util.hpp"

using namespace tessera;

namespace {

using Axes = std::vector<std::optional<std::string>>;
using Layouts = std::vector<std::pair<std::string, Axes>>;

struct ModelCase {
  std::string file;
  std::vector<std::string> overrides;  // of the zoo's file, as `--set` takes them
  std::int64_t batch;
  std::function<std::pair<Tensor, Tensor>(std::uint64_t seed)> batch_of;  // inputs, targets
  double metric_tolerance = 0;  // see the top of the file
};

const std::optional<std::string> none;
const std::optional<std::string> batch_axis = "batch", model_axis = "model";

ModelCase mlp_case() {
  return {"mlp.yaml", {}, 16, [](std::uint64_t s) {
            return std::pair{test::random_tensor({16, 784}, static_cast<unsigned>(s)), test::random_labels({16}, 10, s)};
          }};
}
ModelCase cnn_case() {
  return {"cnn.yaml", {}, 8, [](std::uint64_t s) {
            return std::pair{test::random_tensor({8, 28, 28, 1}, static_cast<unsigned>(s)), test::random_labels({8}, 10, s)};
          }};
}
ModelCase gpt_case() {
  return {"gpt.yaml", test::gpt_context(32), 8, [](std::uint64_t s) {
            return std::pair{test::random_labels({8, 32}, 256, s), test::random_labels({8, 32}, 256, s + 100)};
          },
          1.5 / 256};
}

Model model_of(const ModelCase& c) { return test::zoo_model(c.file, c.overrides); }

struct RunResult {
  std::vector<float> losses;
  std::vector<std::map<std::string, double>> metrics;  // per step
  std::map<std::string, std::vector<float>> weights;
};

TrainingSpec three_steps(std::int64_t batch, const std::string& optimizer) {
  return parse_training(ConfigNode::parse("training: {loss: {type: sparse_categorical_crossentropy, from_logits: true}, "
                                          "metrics: [accuracy, top_5_accuracy], optimizer: " + optimizer + ", batch_size: " +
                                          std::to_string(batch) + ", seed: 7}")["training"]);
}

// SGD with momentum: its velocity is optimizer state, split like its parameter.
const std::string kSgd = "{type: sgd, learning_rate: 0.1, momentum: 0.9}";
const std::string kAdam = "{type: adam, learning_rate: 1.0e-3}";

// With `defer`, the store defers its values, as a job of several processes's
// does: every variable must still have no whole value after the three steps.
RunResult train_model(const Model& model, const ModelCase& c, const Distribution* distribution,
                      const std::string& optimizer = kSgd, bool defer = false) {
  VariableStore store;
  store.defer_values(defer);
  std::unique_ptr<Trainer> trainer =
      distribution ? std::make_unique<Trainer>(model, three_steps(c.batch, optimizer), store, *distribution)
                   : std::make_unique<Trainer>(model, three_steps(c.batch, optimizer), store, test::single_device());
  RunResult result;
  for (std::uint64_t step = 0; step < 3; ++step) {
    auto [inputs, targets] = c.batch_of(step + 1);
    Evaluation e = trainer->train_step(inputs, targets);
    result.losses.push_back(static_cast<float>(e.loss));
    result.metrics.push_back(e.metrics);
  }
  if (defer)
    for (const auto& v : store.variables()) {
      INFO(v.path << " was made whole");
      CHECK(v.deferred());
    }
  trainer->sync_store();
  for (const auto& v : store.variables()) result.weights[v.path] = v.value.to_vector<float>();
  return result;
}

RunResult train(const ModelCase& c, const Distribution* distribution, const std::string& optimizer = kSgd) {
  return train_model(model_of(c), c, distribution, optimizer);
}

const RunResult& single_device(const ModelCase& c) {
  static std::map<std::string, RunResult> cache;
  std::string key = c.file + " on " + test::single_device().str();
  for (const auto& assignment : c.overrides) key += " " + assignment;  // another context is another model
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, train(c, nullptr)).first;
  return it->second;
}

void check_same(const RunResult& expected, const RunResult& actual, const std::string& what, float weight_tolerance = 2e-5f,
                double metric_tolerance = 0) {
  INFO(what);
  for (std::size_t i = 0; i < expected.losses.size(); ++i) {
    INFO("step " << i + 1 << ": loss " << actual.losses[i] << " vs single-device " << expected.losses[i]);
    CHECK(std::abs(actual.losses[i] - expected.losses[i]) <= 1e-5f * std::abs(expected.losses[i]));
    REQUIRE(actual.metrics[i].size() == 2);
    for (const auto& entry : expected.metrics[i]) {
      const auto& metric = entry.first;
      const auto& want = entry.second;
      INFO(metric << " " << actual.metrics[i].at(metric) << " vs single-device " << want);
      CHECK(std::abs(actual.metrics[i].at(metric) - want) <= metric_tolerance + 1e-12);
    }
  }
  REQUIRE(actual.weights.size() == expected.weights.size());
  for (const auto& entry : expected.weights) {
    const auto& path = entry.first;
    const auto& want = entry.second;
    const auto& got = actual.weights.at(path);
    REQUIRE(got.size() == want.size());
    // The first element out of tolerance; written so that a NaN or an infinity is out of it too.
    std::size_t at = want.size();
    for (std::size_t i = 0; i < want.size() && at == want.size(); ++i)
      if (!(std::abs(got[i] - want[i]) <= weight_tolerance + 1e-4f * std::abs(want[i]))) at = i;
    INFO(path << "[" << at << "] = " << (at < got.size() ? got[at] : 0.0f) << ", single-device "
              << (at < want.size() ? want[at] : 0.0f));
    CHECK(at == want.size());
  }
}

const std::vector<std::vector<std::int64_t>> kMeshes = {{1, 1}, {2, 1}, {1, 2}, {2, 2}, {4, 2}, {2, 4}, {1, 8}, {8, 1}};

// Runs `c` on every mesh with the layout map `layouts` (empty: data parallel)
// and compares each with the single-device run.
void check_matrix(const ModelCase& c, const std::function<Layouts(std::int64_t model_devices)>& layouts_for) {
  const test::MeshDeviceScope scope;
  const RunResult& expected = single_device(c);
  for (const auto& shape : kMeshes) {
    const std::int64_t devices = shape[0] * shape[1];
    DeviceMesh mesh(shape, {"batch", "model"}, test::mesh_devices(devices));
    const Layouts layouts = layouts_for ? layouts_for(shape[1]) : Layouts{};
    LayoutMap map;
    for (const auto& [key, axes] : layouts) map.add(key, TensorLayout(axes));
    std::unique_ptr<Distribution> distribution;
    if (layouts.empty()) distribution = std::make_unique<DataParallel>(mesh);
    else distribution = std::make_unique<ModelParallel>(mesh, map, "batch");
    check_same(expected, train(c, distribution.get()), c.file + " on " + distribution->str(), 2e-5f, c.metric_tolerance);
  }
}

// Megatron: the first of each pair of dense layers splits its columns, the
// second its rows; attention splits heads.
const Layouts kMlpMegatron = {{"dense/kernel", {none, model_axis}},
                              {"dense/bias", {model_axis}},
                              {"dense_1/kernel", {model_axis, none}}};
const Layouts kMlpFsdp = {{"dense(_1)?/kernel", {batch_axis, model_axis}}, {"dense_2/kernel", {batch_axis, none}}};

const Layouts kCnnMegatron = {{"conv2d/kernel", {none, none, none, model_axis}},
                              {"conv2d/bias", {model_axis}},
                              {"conv2d_1/kernel", {none, none, model_axis, none}},
                              {"dense/kernel", {none, model_axis}},
                              {"dense/bias", {model_axis}},
                              {"dense_1/kernel", {model_axis, none}}};
const Layouts kCnnFsdp = {{"conv2d_1/kernel", {none, none, batch_axis, model_axis}},
                          {"dense/kernel", {batch_axis, model_axis}},
                          {"dense_1/kernel", {batch_axis, none}}};

// Attention splits heads; where the model axis does not divide the 4 heads
// (8 devices), the key dimension splits instead (the projection kernels are
// then gathered: correct, but not Megatron).
Layouts gpt_megatron(std::int64_t model_devices) {
  bool heads = 4 % model_devices == 0;
  return {{"(query|key|value)/kernel", heads ? Axes{none, model_axis, none} : Axes{none, none, model_axis}},
          {"(query|key|value)/bias", heads ? Axes{model_axis, none} : Axes{none, model_axis}},
          {"attention_output/kernel", heads ? Axes{model_axis, none, none} : Axes{none, model_axis, none}},
          {"ffn_in/kernel", {none, model_axis}},
          {"ffn_in/bias", {model_axis}},
          {"ffn_out/kernel", {model_axis, none}},
          {"_embedding/embeddings", {none, model_axis}},
          {"head/kernel", {none, model_axis}}};
}
Layouts gpt_fsdp(std::int64_t) {
  return {{"(ffn_in|ffn_out|head)/kernel", {batch_axis, model_axis}},
          {"(query|key|value)/kernel", {batch_axis, none, model_axis}},
          {"attention_output/kernel", {none, model_axis, batch_axis}},
          {"_embedding/embeddings", {batch_axis, model_axis}}};
}

auto fixed(const Layouts& layouts) {
  return [layouts](std::int64_t) { return layouts; };
}

}  // namespace

TEST_CASE("sharded training equals one device: MLP data parallel") { check_matrix(mlp_case(), nullptr); }
TEST_CASE("sharded training equals one device: MLP Megatron column/row parallel") { check_matrix(mlp_case(), fixed(kMlpMegatron)); }
TEST_CASE("sharded training equals one device: MLP fully sharded") { check_matrix(mlp_case(), fixed(kMlpFsdp)); }
TEST_CASE("sharded training equals one device: CNN data parallel") { check_matrix(cnn_case(), nullptr); }
TEST_CASE("sharded training equals one device: CNN Megatron column/row parallel") { check_matrix(cnn_case(), fixed(kCnnMegatron)); }
TEST_CASE("sharded training equals one device: CNN fully sharded") { check_matrix(cnn_case(), fixed(kCnnFsdp)); }
TEST_CASE("sharded training equals one device: GPT data parallel") { check_matrix(gpt_case(), nullptr); }
TEST_CASE("sharded training equals one device: GPT Megatron column/row parallel") { check_matrix(gpt_case(), gpt_megatron); }
TEST_CASE("sharded training equals one device: GPT fully sharded") { check_matrix(gpt_case(), gpt_fsdp); }

// Sharded initialisation: each device draws its own block of every variable
// (and of the optimizer state), which equals the slice of the whole the eager
// store would have made, so training is bit for bit the same.
TEST_CASE("a deferring store: each device draws only its block, and trains as the eager store") {
  const test::MeshDeviceScope scope;
  struct Run {
    ModelCase c;
    Layouts layouts;
    std::vector<std::int64_t> mesh;
  };
  for (const Run& run : {Run{mlp_case(), kMlpMegatron, {2, 2}}, Run{mlp_case(), kMlpFsdp, {2, 4}},
                         Run{gpt_case(), gpt_megatron(2), {2, 2}}}) {
    DeviceMesh mesh(run.mesh, {"batch", "model"}, test::mesh_devices(run.mesh[0] * run.mesh[1]));
    LayoutMap map;
    for (const auto& [key, axes] : run.layouts) map.add(key, TensorLayout(axes));
    ModelParallel distribution(mesh, map, "batch");
    const Model model = model_of(run.c);
    const RunResult eager = train_model(model, run.c, &distribution, kAdam);
    const RunResult deferred = train_model(model, run.c, &distribution, kAdam, /*defer=*/true);
    check_same(eager, deferred, run.c.file + " deferred on " + distribution.str(), 0.0f);
    CHECK(eager.losses == deferred.losses);
  }
}

TEST_CASE("sharded training equals one device: Adam state split like its parameters") {
  const test::MeshDeviceScope scope;
  ModelCase c = gpt_case();
  RunResult expected = train(c, nullptr, kAdam);
  for (const auto& shape : std::vector<std::vector<std::int64_t>>{{2, 2}, {1, 4}}) {
    DeviceMesh mesh(shape, {"batch", "model"}, test::mesh_devices(shape[0] * shape[1]));
    LayoutMap map;
    for (const auto& [key, axes] : gpt_megatron(shape[1])) map.add(key, TensorLayout(axes));
    ModelParallel distribution(mesh, map, "batch");
    check_same(expected, train(c, &distribution, kAdam), "gpt.yaml with Adam on " + distribution.str(), 2e-4f, c.metric_tolerance);
  }
}

namespace {

AutoTpPlan gpt_auto_tp(const DeviceMesh& mesh) {
  Model model = test::zoo_model("gpt.yaml");
  VariableStore store;
  model.build(store, 7);
  return plan_auto_tp(model, store, mesh, "model");
}

DeviceMesh mesh_of(std::int64_t batch, std::int64_t model) {
  return DeviceMesh({batch, model}, {"batch", "model"}, test::mesh_devices(batch * model));
}

}  // namespace

TEST_CASE("AutoTP plans the GPT as Megatron does: heads, feed-forward pairs, embeddings, the head") {
  const test::MeshDeviceScope scope;
  for (std::int64_t model_devices : {2, 4}) {
    DeviceMesh mesh = mesh_of(8 / model_devices, model_devices);
    AutoTpPlan plan = gpt_auto_tp(mesh);
    LayoutMap megatron;
    for (const auto& [key, axes] : gpt_megatron(model_devices)) megatron.add(key, TensorLayout(axes));
    for (const auto& entry : plan.variables) {
      const auto& path = entry.first;
      const auto& layout = entry.second;
      INFO(path << " on " << mesh.str());
      auto expected = megatron.lookup(path);
      CHECK(layout == (expected ? *expected : TensorLayout::replicated(layout.rank())));
    }
  }
  // Four heads do not divide over eight devices: attention falls back to
  // replicated, says so, and the feed-forward pairs still split.
  AutoTpPlan plan = gpt_auto_tp(mesh_of(1, 8));
  CHECK(plan.variables.at("block_0/attention/query/kernel").is_replicated());
  CHECK(plan.variables.at("block_0/ffn_in/kernel") == TensorLayout({none, model_axis}));
  auto block = std::find_if(plan.layers.begin(), plan.layers.end(), [](const auto& l) { return l.layer == "block_0"; });
  REQUIRE(block != plan.layers.end());
  CHECK(block->why.find("heads 4 do not divide over 'model' of size 8") != std::string::npos);
}

TEST_CASE("AutoTP trains the GPT to the single-device losses on 1x8, 2x4 and 4x2") {
  const test::MeshDeviceScope scope;
  const ModelCase c = gpt_case();
  const RunResult& expected = single_device(c);
  for (auto [batch, model] : std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 8}, {2, 4}, {4, 2}}) {
    DeviceMesh mesh = mesh_of(batch, model);
    ModelParallel distribution(mesh, gpt_auto_tp(mesh).layout_map(), "batch");
    check_same(expected, train(c, &distribution), "gpt.yaml with AutoTP on " + distribution.str(), 2e-5f, c.metric_tolerance);
  }
}

TEST_CASE("AutoTP needs exactly the collectives of the hand-written Megatron layout") {
  const test::MeshDeviceScope scope;
  const ModelCase c = gpt_case();
  DeviceMesh mesh = mesh_of(2, 4);
  LayoutMap megatron;
  for (const auto& [key, axes] : gpt_megatron(4)) megatron.add(key, TensorLayout(axes));
  auto accounting = [&](const LayoutMap& map) {
    ModelParallel distribution(mesh, map, "batch");
    Model model = model_of(c);
    VariableStore store;
    Trainer trainer(model, three_steps(c.batch, kSgd), store, distribution);
    auto [inputs, targets] = c.batch_of(1);
    trainer.train_step(inputs, targets);
    std::map<std::string, std::pair<std::int64_t, std::int64_t>> totals;  // calls, bytes
    for (const auto& [key, stats] : trainer.communicator()->accounting().total())
      totals[std::string(name(key.first)) + " " + key.second] = {stats.calls, stats.bytes};
    return totals;
  };
  auto hand_written = accounting(megatron), automatic = accounting(gpt_auto_tp(mesh).layout_map());
  CHECK(!hand_written.empty());
  CHECK(automatic == hand_written);
}

TEST_CASE("data parallel dropout draws the single-device mask") {
  // Each device's block of rows offsets the mask stream by its first row.
  const test::MeshDeviceScope scope;
  ModelCase c{"", {}, 16, [](std::uint64_t s) {
                return std::pair{test::random_tensor({16, 784}, static_cast<unsigned>(s)), test::random_labels({16}, 10, s)};
              }};
  Model model = Model::from_config(ConfigNode::parse(R"(
model:
  inputs: [{name: x, shape: [784]}]
  layers:
    - {type: Dense, units: 64, activation: relu}
    - {type: Dropout, rate: 0.5}
    - {type: Dense, units: 10}
)")["model"]);
  DataParallel dp(test::mesh_devices(4));
  check_same(train_model(model, c, nullptr), train_model(model, c, &dp), "dropout under data parallel on cpu:4");
}

TEST_CASE("an activation layout survives a last batch the batch axis does not divide") {
  const test::MeshDeviceScope scope;
  Model model = test::zoo_model("mlp.yaml");
  VariableStore store;
  LayoutMap map;
  map.add("dense/kernel", TensorLayout({none, model_axis}));
  map.add("dense/output", TensorLayout({batch_axis, none}));
  ModelParallel distribution(mesh_of(2, 2), map, "batch");
  Trainer trainer(model, three_steps(16, kSgd), store, distribution);
  // 35 samples: two batches of 16, then 3, which runs replicated.
  Dataset data{test::random_tensor({35, 784}, 9), test::random_labels({35}, 10, 9), "synthetic"};
  auto logs = trainer.fit(data, nullptr);
  CHECK(logs.size() == 1);
  CHECK(logs[0].train.samples == 35);
}

TEST_CASE("zero 1: optimizer state and updates split along the batch axis train as one device") {
  const test::MeshDeviceScope scope;
  for (const ModelCase& c : {mlp_case(), gpt_case()})
    for (const std::string& optimizer : {kSgd, kAdam}) {
      const RunResult expected = train(c, nullptr, optimizer);
      for (auto [batch, model] : std::vector<std::pair<std::int64_t, std::int64_t>>{{4, 1}, {2, 2}}) {
        DeviceMesh mesh = mesh_of(batch, model);
        DataParallel distribution(mesh);
        distribution.set_zero(true);
        check_same(expected, train(c, &distribution, optimizer), c.file + " with " + optimizer + " on " + distribution.str(),
                   optimizer == kAdam ? 2e-4f : 2e-5f, c.metric_tolerance);
      }
    }
}

TEST_CASE("a vocabulary-split embedding is a masked lookup whose rows add up across devices") {
  const test::MeshDeviceScope scope;
  const ModelCase c = gpt_case();
  const RunResult& expected = single_device(c);
  for (auto [batch, model] : std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 4}, {2, 4}, {1, 8}}) {
    LayoutMap map;
    map.add("token_embedding/embeddings", TensorLayout({model_axis, none}));
    ModelParallel distribution(mesh_of(batch, model), map, "batch");
    check_same(expected, train(c, &distribution), "gpt.yaml with a vocabulary-split embedding on " + distribution.str(), 2e-5f,
               c.metric_tolerance);
    // The table is never gathered: each device looks up its own rows.
    Model model_ = model_of(c);
    VariableStore store;
    Trainer trainer(model_, three_steps(c.batch, kSgd), store, distribution);
    const SpmdProgram& program = *trainer.sharded_program(c.batch);
    for (const auto& collective : program.collectives())
      CHECK(program.global().value(collective.value).name != "token_embedding/embeddings");
  }
}

TEST_CASE("sample and class weights, regularizers, validation_split and epoch metrics train on a mesh as on one device") {
  const test::MeshDeviceScope scope;
  // Regularized variables split (dense/kernel's columns, dense_1/kernel's rows)
  // and whole (dense_2): their penalties add partial sums across devices.
  Model model = Model::from_config(ConfigNode::parse(R"(
model:
  name: mlp
  inputs: [{name: image, shape: [784]}]
  layers:
    - {type: Dense, units: 64, activation: relu, kernel_regularizer: {l1: 1.0e-4, l2: 1.0e-3}, bias_regularizer: l2}
    - {type: Dense, units: 64, activation: relu, kernel_regularizer: l2}
    - {type: Dense, units: 10, kernel_regularizer: l1}
)")["model"]);
  Dataset data{test::random_tensor({40, 784}, 21), test::random_labels({40}, 10, 21), "synthetic"};
  data.weights = test::random_tensor({40}, 22, 0.0f, 2.0f);
  const TrainingSpec training = parse_training(ConfigNode::parse(
      "training: {loss: {type: sparse_categorical_crossentropy, from_logits: true, label_smoothing: 0.1}, "
      "metrics: [precision, recall, auc], optimizer: " + kSgd + ", batch_size: 8, epochs: 2, seed: 7, "
      "class_weight: {0: 3.0, 4: 0.5}, validation_split: 0.2}")["training"]);
  struct Run {
    std::vector<EpochLog> logs;
    std::map<std::string, std::vector<float>> weights;
  };
  auto run = [&](const Distribution* distribution) {
    VariableStore store;
    std::unique_ptr<Trainer> trainer = distribution ? std::make_unique<Trainer>(model, training, store, *distribution)
                                                    : std::make_unique<Trainer>(model, training, store, test::single_device());
    Run r{trainer->fit(data, nullptr), {}};
    for (const auto& v : store.variables()) r.weights[v.path] = v.value.to_vector<float>();
    return r;
  };
  const Run expected = run(nullptr);
  REQUIRE(expected.logs.size() == 2);
  CHECK(expected.logs[0].train.samples == 32);
  CHECK(expected.logs[0].validation.samples == 8);
  LayoutMap megatron;
  for (const auto& [key, axes] : kMlpMegatron) megatron.add(key, TensorLayout(axes));
  DataParallel dp(test::mesh_devices(4));
  ModelParallel tp(mesh_of(2, 2), megatron, "batch");
  for (const Distribution* d : std::vector<const Distribution*>{&dp, &tp}) {
    const Run actual = run(d);
    INFO(d->str());
    REQUIRE(actual.logs.size() == 2);
    for (std::size_t e = 0; e < 2; ++e)
      for (Evaluation EpochLog::*pass : {&EpochLog::train, &EpochLog::validation}) {
        const Evaluation &want = expected.logs[e].*pass, &got = actual.logs[e].*pass;
        CHECK(got.loss == doctest::Approx(want.loss).epsilon(1e-5));
        for (const auto& metric : want.metrics) {  // no structured binding: Clang 14 cannot capture one in INFO
          INFO(metric.first);
          CHECK(got.metrics.at(metric.first) == doctest::Approx(metric.second).epsilon(1e-6));
        }
      }
    for (const auto& variable : expected.weights) {
      INFO(variable.first);
      test::check_close(actual.weights.at(variable.first), variable.second, 1e-4, 2e-5);
    }
  }
}
