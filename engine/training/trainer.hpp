// Trainer: fit / evaluate / predict with Keras' meaning, over a Model whose
// variables live in a VariableStore.
//
// Each batch size gets its own traced program (graph, autodiff, updates,
// memory plan), built on first use and reused: a steady-state step allocates
// no device memory. The optimizer step count and learning-rate schedule are
// shared by all programs, so a last partial batch trains like any other.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/data/dataset.hpp"
#include "engine/graph/executor.hpp"
#include "engine/model.hpp"
#include "engine/training/loss.hpp"
#include "engine/training/optimizer.hpp"

namespace tessera {

class ConfigNode;

struct TrainingSpec {
  LossSpec loss;
  OptimizerSpec optimizer;
  std::vector<std::string> metrics;  // accuracy, top_5_accuracy
  std::int64_t epochs = 1;
  std::int64_t batch_size = 32;
  std::uint64_t seed = 0;
  bool shuffle = true;
};

// `training:`; throws ConfigError (unknown keys, metrics, bad values).
TrainingSpec parse_training(ConfigNode node);

// Loss and metrics over a pass (means over samples).
struct Evaluation {
  double loss = 0;
  std::map<std::string, double> metrics;
  std::int64_t samples = 0;
};

struct EpochLog {
  std::int64_t epoch = 0;  // 1-based
  Evaluation train;
  Evaluation validation;  // samples == 0 when there was no validation data
  double seconds = 0;
};

// Called after every training batch and at the end of every epoch.
struct FitCallbacks {
  std::function<void(std::int64_t epoch, std::int64_t batch, std::int64_t batches, const Evaluation& running)> on_batch;
  std::function<void(const EpochLog&)> on_epoch;
};

class Trainer {
 public:
  Trainer(const Model& model, TrainingSpec spec, VariableStore& store, Device device = Device::cpu());
  ~Trainer();

  // Trains for spec.epochs epochs; throws Error when the loss stops being finite.
  std::vector<EpochLog> fit(const Dataset& train, const Dataset* validation, const FitCallbacks& callbacks = {});
  Evaluation evaluate(const Dataset& data);
  // Model outputs for inputs [N, ...], batch by batch: [N, ...output].
  Tensor predict(const Tensor& inputs);

  std::int64_t step() const { return step_; }  // optimizer steps taken

 private:
  struct Program;
  Program& program(std::int64_t batch, bool training, bool with_loss);
  Tensor as_model_input(const Tensor& inputs, const std::string& source) const;
  void accumulate(Evaluation& total, const Program& p, const Tensor& output, const Tensor& targets,
                  std::int64_t batch) const;

  const Model& model_;
  TrainingSpec spec_;
  VariableStore& store_;
  Device device_;
  std::map<std::tuple<std::int64_t, bool, bool>, std::unique_ptr<Program>> programs_;
  std::int64_t step_ = 0;
  std::int64_t total_steps_ = 0;
};

}  // namespace tessera
