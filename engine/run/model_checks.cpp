#include "engine/run/model_checks.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>

#include "distribution/distribution.hpp"
#include "engine/core/error.hpp"
#include "engine/graph/autodiff.hpp"
#include "engine/graph/executor.hpp"
#include "engine/run/run_config.hpp"
#include "engine/run/trainer.hpp"
#include "engine/training/loss.hpp"
#include "layers/regularizer.hpp"

namespace tessera {

namespace {

// Up to `count` distinct flat indices of [0, n), in order, drawn from `gen`.
std::vector<std::int64_t> sample_elements(std::int64_t n, std::int64_t count, std::mt19937_64& gen) {
  std::vector<std::int64_t> all(static_cast<std::size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  if (n > count) {
    std::shuffle(all.begin(), all.end(), gen);
    all.resize(static_cast<std::size_t>(count));
    std::sort(all.begin(), all.end());
  }
  return all;
}

}  // namespace

GradientCheckResult check_model_gradients(const RunConfig& run, const Dataset& data, const GradientCheckOptions& options) {
  const std::int64_t n = options.samples;
  if (n < 1) throw Error("the gradient check needs samples >= 1");
  if (data.size() < n)
    throw DataError(data.label() + " has " + std::to_string(data.size()) + " samples; the gradient check takes the first " +
                    std::to_string(n));
  const TrainingSpec& spec = run.training;
  VariableStore store;
  run.model.build(store, spec.seed);
  // The first n samples as fit() takes them: converted, shaped, weighted.
  Dataset first{data.inputs.rows(0, n), data.targets.rows(0, n), data.source, data.where,
                data.weights.defined() ? data.weights.rows(0, n) : Tensor{}};
  first = Trainer(run.model, spec, store).model_data(first, /*class_weighted=*/true);

  // The training step's loss, as the trainer traces it, in f32 (bf16
  // matmuls would drown finite differences in rounding).
  Graph g;
  Model::Traced traced = run.model.trace(g, n, /*training=*/true, store, spec.seed);
  const ValueId target = g.input("target", first.targets.shape(), first.targets.dtype());
  const ValueId weight = first.weights.defined() ? g.input("sample_weight", {n}) : -1;
  ValueId loss = build_loss(g, spec.loss, traced.output, target, weight);
  if (!traced.regularized.empty()) loss = g.add(loss, regularization_penalty(g, traced.regularized));

  GradientCheckResult result;
  std::vector<std::pair<ValueId, Tensor>> checked;  // leaf, the store's tensor
  for (const auto& [path, id] : traced.variables) {
    Variable* v = store.find(path);
    if (!v->trainable || !is_floating(v->dtype())) continue;
    checked.emplace_back(id, v->value);
    result.variables.push_back(path);
  }
  std::vector<ValueId> wrt;
  for (const auto& [id, value] : checked) wrt.push_back(id);
  auto grads = append_gradients(g, loss, wrt);

  std::vector<ValueId> outputs{loss};
  for (ValueId id : wrt) outputs.push_back(grads.at(id));
  Executor with_gradients(g, outputs), forward(g, {loss});
  for (Executor* e : {&with_gradients, &forward}) {
    e->set_update_step(1, 0.0f);  // one step: every run draws the same dropout mask
    for (const auto& [path, id] : traced.variables) e->bind(id, store.find(path)->value);
    e->bind(traced.inputs[0], first.inputs);
    e->bind(target, first.targets);
    if (weight >= 0) e->bind(weight, first.weights);
  }
  with_gradients.run();

  auto loss_at = [&](float* element, float value) {
    const float saved = *element;
    *element = value;
    forward.run();
    *element = saved;
    return static_cast<double>(forward.output(loss).to_vector<float>()[0]);
  };
  auto disagree = [&](double analytic, double numeric) {
    return std::abs(analytic - numeric) > options.atol + options.rtol * std::abs(numeric);
  };
  std::mt19937_64 gen(options.seed);
  for (std::size_t k = 0; k < checked.size(); ++k) {
    const auto& [id, value] = checked[k];
    const std::vector<float> analytic = with_gradients.output(grads.at(id)).to_vector<float>();
    float* data_of = value.data<float>();
    for (std::int64_t i : sample_elements(value.numel(), options.elements_per_variable, gen)) {
      ++result.elements_checked;
      const double a = analytic[static_cast<std::size_t>(i)];
      double numeric = 0;
      bool mismatch = true;
      for (double h : {options.h, options.h / 10}) {
        const float w = data_of[i];
        numeric = (loss_at(&data_of[i], w + static_cast<float>(h)) - loss_at(&data_of[i], w - static_cast<float>(h))) / (2 * h);
        if (!disagree(a, numeric)) {
          mismatch = false;
          break;
        }
      }
      if (mismatch) result.mismatches.push_back({result.variables[k], i, a, numeric});
    }
  }
  return result;
}

namespace {

// 7 significant digits: what tells f32 values apart.
std::string number(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.7g", x);
  return text;
}

}  // namespace

std::vector<std::string> ShardedComparison::disagreements() const {
  std::vector<std::string> out;
  if (one_device_losses.size() != sharded_losses.size())
    out.push_back("one device ran " + std::to_string(one_device_losses.size()) + " steps, " + distribution + " " +
                  std::to_string(sharded_losses.size()));
  for (std::size_t i = 0; i < std::min(one_device_losses.size(), sharded_losses.size()); ++i) {
    const double one = one_device_losses[i], sharded = sharded_losses[i];
    if (!(std::abs(sharded - one) <= options.loss_rtol * std::abs(one)))
      out.push_back("step " + std::to_string(i + 1) + ": loss " + number(sharded) + " sharded, " + number(one) +
                    " on one device");
  }
  for (const auto& [path, d] : weights)
    if (!(d.largest <= options.weight_atol + options.weight_rtol * std::abs(d.one_device)))
      out.push_back(path + " element " + std::to_string(d.element) + ": differs by " + number(d.largest) +
                    " from one device's " + number(d.one_device));
  return out;
}

namespace {

// The run as compare_sharded_run trains it: `steps` steps of one epoch,
// nothing saved or called back, no validation.
void quiet_short_run(RunConfig& run, std::int64_t steps) {
  run.training.epochs = 1;
  run.training.steps_per_epoch = steps;
  run.training.validation_split = 0;
  run.training.checkpoint = {};
  run.training.callbacks.clear();
}

// fit()'s running loss after each batch.
std::vector<double> fit_losses(Trainer& trainer, const Dataset& data) {
  std::vector<double> losses;
  FitCallbacks callbacks;
  callbacks.on_batch = [&](std::int64_t, std::int64_t, std::int64_t, const Evaluation& running) {
    losses.push_back(running.loss);
  };
  trainer.fit(data, nullptr, callbacks);
  return losses;
}

}  // namespace

ShardedComparison compare_sharded_run(const std::filesystem::path& file, std::vector<std::string> overrides,
                                      const ShardedCheckOptions& options) {
  if (options.steps < 1) throw Error("the sharded check needs steps >= 1");
  RunConfig sharded = load_run_config(file, overrides);
  overrides.push_back("distribution=null");
  RunConfig one = load_run_config(file, overrides);
  if (!sharded.distribution)
    throw ConfigError(file.string() + ": the sharded check compares a run on the config's distribution with one on one "
                      "device, but it has no distribution: section");
  if (!sharded.train_data)
    throw ConfigError(file.string() + ": the sharded check trains on data.train, which the config does not have");
  quiet_short_run(sharded, options.steps);
  quiet_short_run(one, options.steps);
  const Dataset data = load_dataset(*sharded.train_data);

  ShardedComparison result;
  result.options = options;
  VariableStore one_store;
  one.model.build(one_store, one.training.seed);
  std::vector<std::string> model_paths;  // before the trainer adds optimizer state
  for (const Variable& v : one_store.variables()) model_paths.push_back(v.path);
  {
    Trainer trainer(one.model, one.training, one_store, one.device);
    result.one_device_losses = fit_losses(trainer, data);
  }
  VariableStore sharded_store;
  std::unique_ptr<Trainer> trainer = make_trainer(sharded, sharded_store);
  result.distribution = sharded.distribution->distribution->str();
  result.sharded_losses = fit_losses(*trainer, data);  // fit() writes the devices' weights back to the store

  for (const std::string& path : model_paths) {
    const Tensor& a = one_store.find(path)->value;
    Variable* b = sharded_store.find(path);
    if (a.dtype() != DType::f32 || b == nullptr) continue;
    const std::vector<float> x = a.to_vector<float>(), y = VariableStore::materialize(*b).to_vector<float>();
    ShardedComparison::WeightDifference& d = result.weights[path];
    for (std::size_t i = 0; i < x.size(); ++i)
      if (const double diff = std::abs(static_cast<double>(y[i]) - x[i]);
          !std::isnan(d.largest) && (std::isnan(diff) || diff > d.largest))  // the first NaN stays
        d = {diff, static_cast<std::int64_t>(i), x[i]};
  }
  return result;
}

}  // namespace tessera
