// Testing one's own model with doctest, through the installed package
// (<tessera/testing/doctest.hpp>; link Tessera::tessera and doctest):
//
//   #define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
//   #include <tessera/testing/doctest.hpp>
//
//   TEST_CASE("my model") {
//     tessera::testing::check_gradients("my_model.yaml");             // autodiff against finite differences
//     tessera::testing::check_sharded_run("my_model.yaml");           // its distribution: as on one device
//     auto history = tessera::testing::fit_history("my_model.yaml", {"training.epochs=3"});
//     CHECK(history.back().train.loss < history.front().train.loss);  // it learns
//   }
//
// Each check reports through doctest: a failing one names the variable, the
// element or the step, and both values. The measurements themselves are in
// engine/run/model_checks.hpp, for other frameworks.
#pragma once

#include <cmath>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "engine/core/tensor.hpp"
#include "engine/data/dataset.hpp"
#include "engine/run/model_checks.hpp"
#include "engine/run/run_config.hpp"
#include "engine/run/trainer.hpp"
#include "testing/error_of.hpp"

namespace tessera::testing {

// Checks |actual - expected| <= atol + rtol * |expected| elementwise (f32,
// same shape), naming the first element that is not.
struct Tolerance {
  double rtol = 1e-5;
  double atol = 1e-6;
};
inline void check_close(const Tensor& actual, const Tensor& expected, Tolerance tolerance = {}) {
  REQUIRE_MESSAGE(actual.shape() == expected.shape(),
                  "shapes differ: " << actual.describe() << " against " << expected.describe());
  const std::vector<float> a = actual.to_vector<float>(), e = expected.to_vector<float>();
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!(std::abs(static_cast<double>(a[i]) - e[i]) <= tolerance.atol + tolerance.rtol * std::abs(e[i]))) {
      FAIL_CHECK("element " << i << ": " << a[i] << ", expected " << e[i]);
      return;
    }
}

// The model of the run config `file` (with `overrides`, as `tessera train
// --set`): its loss's gradient with respect to every trainable variable, by
// autodiff, agrees with finite differences on the first samples of its
// data.train (engine/run/model_checks.hpp says how many elements and which
// tolerance).
inline void check_gradients(const std::filesystem::path& file, const std::vector<std::string>& overrides = {},
                            const GradientCheckOptions& options = {}) {
  RunConfig run = load_run_config(file, overrides);
  REQUIRE_MESSAGE(run.train_data.has_value(), file.string() << ": check_gradients takes its samples from data.train");
  const GradientCheckResult result = check_model_gradients(run, load_dataset(*run.train_data), options);
  CHECK_MESSAGE(result.elements_checked > 0, file.string() << ": the model has no trainable variables to check");
  std::ostringstream found;
  found.precision(7);
  for (const GradientMismatch& m : result.mismatches)
    found << "\n  " << m.variable << " element " << m.element << ": autodiff " << m.autodiff << ", finite difference "
          << m.finite_difference;
  CHECK_MESSAGE(result.mismatches.empty(), file.string() << ": " << result.mismatches.size() << " of "
                                                         << result.elements_checked << " gradient elements disagree:"
                                                         << found.str());
}

// A few training steps of `file` on its distribution's mesh give the losses
// and weights of the same steps on one device.
inline void check_sharded_run(const std::filesystem::path& file, const std::vector<std::string>& overrides = {},
                              const ShardedCheckOptions& options = {}) {
  const ShardedComparison result = compare_sharded_run(file, overrides, options);
  std::string found;
  for (const std::string& d : result.disagreements()) found += "\n  " + d;
  CHECK_MESSAGE(found.empty(), file.string() << " on " << result.distribution << " differs from one device:" << found);
}

// fit() of `file` (with `overrides`) on its data.train, on one device, with
// nothing saved and no callbacks: each epoch's log, as Keras' History
// (history.back().train.loss, .validation.metrics["accuracy"], ...).
inline std::vector<EpochLog> fit_history(const std::filesystem::path& file, std::vector<std::string> overrides = {}) {
  overrides.push_back("distribution=null");
  RunConfig run = load_run_config(file, overrides);
  REQUIRE_MESSAGE(run.train_data.has_value(), file.string() << ": fit_history trains on data.train");
  run.training.checkpoint = {};
  run.training.callbacks.clear();
  VariableStore store;
  run.model.build(store, run.training.seed);
  Trainer trainer(run.model, run.training, store, run.device);
  const Dataset validation = run.validation_data ? load_dataset(*run.validation_data) : Dataset{};
  return trainer.fit(load_dataset(*run.train_data), run.validation_data ? &validation : nullptr);
}

}  // namespace tessera::testing
