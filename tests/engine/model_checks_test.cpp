// The checks a user runs on a model of their own (engine/run/model_checks.hpp)
// and their doctest face (testing/doctest.hpp): they pass on a right model,
// and report what differs when something does.
#include <doctest/doctest.h>

#include <fstream>

#include "engine/run/model_checks.hpp"
#include "engine/run/run_config.hpp"
#include "testing/doctest.hpp"
#include "tests/temp_dir.hpp"
#include "tests/test_util.hpp"

using namespace tessera;

namespace {

// A run config of a user's making in `dir`: an MLP with dropout, a
// regularizer and class weights on synthetic blobs, split over cpu:2 by a
// Megatron-style layout map.
std::filesystem::path write_config(const test::TempDir& dir) {
  const auto file = dir / "my_model.yaml";
  std::ofstream(file) << R"(model:
  name: my_model
  inputs: [{name: x, shape: [6]}]
  layers:
    - {type: Dense, units: 12, activation: tanh, kernel_regularizer: {l2: 0.01}}
    - {type: Dropout, rate: 0.25}
    - {type: Dense, units: 3}
training:
  loss: {type: sparse_categorical_crossentropy, from_logits: true, label_smoothing: 0.1}
  optimizer: {type: adam, learning_rate: 1.0e-2}
  class_weight: {0: 2.0}
  epochs: 4
  batch_size: 16
  seed: 3
data:
  train: {type: synthetic, samples: 64, shape: [6], classes: 3, seed: 1}
distribution:
  devices: cpu:2
  mesh: {shape: [1, 2], axis_names: [batch, model]}
  type: model_parallel
  batch_dim_name: batch
  layout_map:
    'dense/kernel': [null, model]
    'dense/bias': [model]
    'dense_1/kernel': [model, null]
)";
  return file;
}

}  // namespace

TEST_CASE("check_model_gradients: autodiff of a user's model agrees with finite differences, and reports where not") {
  test::TempDir dir;
  RunConfig run = load_run_config(write_config(dir));
  const Dataset data = load_dataset(*run.train_data);

  GradientCheckResult right = check_model_gradients(run, data);
  CHECK(right.variables == std::vector<std::string>{"my_model/dense/kernel", "my_model/dense/bias",
                                                    "my_model/dense_1/kernel", "my_model/dense_1/bias"});
  CHECK(right.elements_checked == 6 + 6 + 6 + 3);  // 6 drawn of each, and dense_1/bias has 3
  for (const GradientMismatch& m : right.mismatches)
    FAIL_CHECK(m.variable << " element " << m.element << ": " << m.autodiff << " against " << m.finite_difference);

  // No tolerance at all: f32 differences never match autodiff to the last
  // bit, so each element is reported, named and with both values.
  GradientCheckOptions exact;
  exact.atol = exact.rtol = 0;
  GradientCheckResult strict = check_model_gradients(run, data, exact);
  REQUIRE(!strict.mismatches.empty());
  const GradientMismatch& m = strict.mismatches.front();
  CHECK(m.variable == "my_model/dense/kernel");
  CHECK(m.element >= 0);
  CHECK(m.element < 6 * 12);
  CHECK(m.autodiff != m.finite_difference);

  // The data goes through fit()'s conversions and their errors: float
  // targets that are not class ids are refused as fit() refuses them.
  Dataset halves = data;
  halves.targets = Tensor::from_vector(std::vector<float>(64, 0.5f), {64});
  CHECK(test::error_of<ShapeError>([&] { check_model_gradients(run, halves); })
            .find("a regression target needs a loss such as mse") != std::string::npos);

  GradientCheckOptions too_many;
  too_many.samples = 65;
  CHECK(test::error_of<DataError>([&] { check_model_gradients(run, data, too_many); })
            .find("has 64 samples; the gradient check takes the first 65") != std::string::npos);
}

TEST_CASE("compare_sharded_run: a user's layout map trains as one device does, and differences are named") {
  test::TempDir dir;
  const auto file = write_config(dir);
  for (const char* mesh : {"[1, 2]", "[2, 1]"}) {
    CAPTURE(std::string(mesh));
    ShardedComparison c = compare_sharded_run(file, {std::string("distribution.mesh.shape=") + mesh});
    CHECK(c.distribution.find("mesh " + std::string(mesh)) != std::string::npos);
    CHECK(c.one_device_losses.size() == 3);
    CHECK(c.sharded_losses.size() == 3);
    CHECK(c.weights.size() == 4);
    CHECK(c.disagreements().empty());
    for (const std::string& d : c.disagreements()) MESSAGE(d);
    CHECK(c.one_device_losses.back() != c.one_device_losses.front());  // three steps, three losses
  }

  ShardedComparison off;
  off.distribution = "model_parallel on mesh [1, 2]";
  off.one_device_losses = {1.0, 0.9};
  off.sharded_losses = {1.0, 0.95};
  off.weights["my_model/dense/kernel"] = {0.01, 5, 0.5};
  off.weights["my_model/dense/bias"] = {1e-5, 0, 0.1};
  const std::vector<std::string> d = off.disagreements();
  REQUIRE(d.size() == 2);
  CHECK(d[0] == "step 2: loss 0.95 sharded, 0.9 on one device");
  CHECK(d[1] == "my_model/dense/kernel element 5: differs by 0.01 from one device's 0.5");

  CHECK(test::error_of<ConfigError>([&] { compare_sharded_run(file, {"distribution=null"}); })
            .find("has no distribution: section") != std::string::npos);
}

TEST_CASE("testing/doctest.hpp: a user's first test, through the helpers the installed package offers") {
  test::TempDir dir;
  const auto file = write_config(dir);
  testing::check_gradients(file);
  testing::check_sharded_run(file);
  const std::vector<EpochLog> history = testing::fit_history(file);
  REQUIRE(history.size() == 4);
  CHECK(history.back().train.loss < history.front().train.loss);
  CHECK(dir.entries() == std::vector<std::string>{"my_model.yaml"});  // nothing saved beside it

  const Tensor a = Tensor::from_vector<float>({1.0f, 2.0f}, {2});
  testing::check_close(a, Tensor::from_vector<float>({1.0f, 2.0000001f}, {2}));
  CHECK(testing::error_of([&] { load_run_config(dir / "missing.yaml"); }).find("missing.yaml") != std::string::npos);
}
