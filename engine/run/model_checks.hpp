// Checks a user runs on a model of their own, as the engine's own tests run
// them on the zoo: the model's gradients against finite differences, and a
// sharded run against the one-device run of the same seed. They return what
// they measured; <tessera/testing/doctest.hpp> turns that into doctest
// checks (and any other test framework can do the same).
//
//   RunConfig run = load_run_config("my_model.yaml");
//   GradientCheckResult g = check_model_gradients(run, load_dataset(*run.train_data));
//   for (const GradientMismatch& m : g.mismatches) ...  // none when autodiff is right
//
//   ShardedComparison s = compare_sharded_run("my_model.yaml", {"distribution.mesh.shape=[2, 2]"});
//   for (const std::string& d : s.disagreements()) ...
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace tessera {

struct Dataset;
struct RunConfig;

struct GradientCheckOptions {
  // The first `samples` samples of the data make the batch whose loss is differentiated.
  std::int64_t samples = 4;
  // Elements checked per variable, drawn at random (seeded) when it has more:
  // each costs two forward passes.
  std::int64_t elements_per_variable = 6;
  // Central differences (loss(w + h) - loss(w - h)) / 2h in f32; an element
  // that disagrees by more than atol + rtol * |finite difference| is checked
  // again with h / 10 (a step of h may cross a ReLU's kink), and is a
  // mismatch only if it disagrees at both.
  double h = 1e-2;
  double atol = 2e-3;
  double rtol = 2e-2;
  std::uint64_t seed = 0;
};

struct GradientMismatch {
  std::string variable;  // its path ("my_model/dense/kernel")
  std::int64_t element = 0;  // flat index
  double autodiff = 0, finite_difference = 0;  // the latter with the smaller step
};

struct GradientCheckResult {
  std::int64_t elements_checked = 0;
  std::vector<std::string> variables;  // the trainable variables checked, by path
  std::vector<GradientMismatch> mismatches;
};

// The gradient of the run's training loss (its loss, sample weights and
// regularizers, in training mode: dropout with one fixed mask) with respect
// to each trainable variable, by autodiff and by finite differences, on the
// first options.samples samples of `data`, on cpu:0 with weights drawn from
// training.seed. Throws Error when the data does not fit the model (as fit()
// would) or has fewer samples than asked.
GradientCheckResult check_model_gradients(const RunConfig& run, const Dataset& data,
                                          const GradientCheckOptions& options = {});

struct ShardedCheckOptions {
  std::int64_t steps = 3;  // optimizer steps, on the first batches of data.train
  // Sharded runs add partial sums in another order: losses agree within
  // loss_rtol, weights within weight_atol + weight_rtol * |one device's|
  // (Adam divides by each gradient's own size, which makes rounding visible).
  double loss_rtol = 1e-4;
  double weight_atol = 2e-4;
  double weight_rtol = 1e-3;
};

struct ShardedComparison {
  std::string distribution;  // the sharded run's, as Distribution::str() writes it
  // The loss of each step, as fit()'s running mean after each batch.
  std::vector<double> one_device_losses, sharded_losses;
  // Per model variable (by path), the largest |sharded - one device| and that
  // element's one-device value.
  struct WeightDifference {
    double largest = 0;
    std::int64_t element = 0;
    double one_device = 0;
  };
  std::map<std::string, WeightDifference> weights;
  ShardedCheckOptions options;

  // One line per step or variable outside the tolerances, naming it and both
  // values; empty when the sharded run computed what one device computes.
  std::vector<std::string> disagreements() const;
};

// Trains options.steps steps of the run config `file` (with `overrides`, as
// `tessera train --set`) twice from the same seed: on its distribution's
// mesh (logical CPU devices, as `tessera train` makes them) and on one device
// (`distribution=null`), and compares the losses and the weights. Nothing is
// saved (no checkpoints, no callbacks). Throws ConfigError when the config
// has no distribution or no data.train.
ShardedComparison compare_sharded_run(const std::filesystem::path& file, std::vector<std::string> overrides = {},
                                      const ShardedCheckOptions& options = {});

}  // namespace tessera
