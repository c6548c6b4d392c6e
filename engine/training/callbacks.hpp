// Callbacks of Trainer::fit, by Keras' names, in YAML (`training.callbacks`)
// and in C++ (FitCallbacks::callbacks):
//
//   - {type: early_stopping, monitor: val_loss, patience: 3, min_delta: 0, mode: auto,
//      restore_best_weights: false, start_from_epoch: 0}
//   - {type: model_checkpoint, dir: runs/best, monitor: val_loss, save_best_only: true, mode: auto}
//     (a resumed run's epochs must beat the figure of the checkpoint already in dir)
//   - {type: reduce_lr_on_plateau, monitor: val_loss, factor: 0.1, patience: 10,
//      min_delta: 1.0e-4, cooldown: 0, min_lr: 0}
//   - {type: csv_logger, path: runs/log.csv}      # one row per epoch (Keras' CSVLogger)
//   - {type: json_logger, path: runs/log.jsonl}   # one JSON object per epoch
//
// `monitor` is a figure of the epoch's log: loss, a metric, or either with
// val_ for the validation data; mode auto maximises accuracies, AUC,
// precision and recall and minimises the rest. A monitor the run does not
// log is a ConfigError before the first step. A run resumed from a
// checkpoint goes on counting where its run was: early_stopping's epochs
// without improvement and best figure (not with restore_best_weights, whose
// best weights the checkpoint does not hold), reduce_lr_on_plateau's and its
// cooldown (and the reduced rate: TrainingState::learning_rate_scale).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/training/fit_log.hpp"

namespace tessera {

class ConfigNode;

// What a checkpoint says of the epoch it was saved after.
struct SavedEpoch {
  std::int64_t epoch = 0;
  std::map<std::string, double> figures;  // that epoch's logged figures by name ("loss", "val_accuracy")
};

// A copy of the model's variables: path and bytes.
struct WeightSnapshot {
  std::vector<std::pair<std::string, std::vector<std::byte>>> variables;
};

// What a callback may do to the run it watches (Trainer implements it).
class FitControl {
 public:
  virtual ~FitControl() = default;
  // The figures each epoch's log will hold ("loss", "accuracy", "val_loss", ...).
  virtual std::vector<std::string> log_names() const = 0;
  // The epoch this fit() starts at: 1, or later when it resumes a run.
  virtual std::int64_t first_epoch() const = 0;
  // Ends fit() after this epoch (its checkpoint, if any, is still saved).
  virtual void stop_training() = 0;
  // A factor on the schedule's learning rate from the next step on.
  virtual double learning_rate_scale() const = 0;
  virtual void set_learning_rate_scale(double scale) = 0;
  // The learning rate of the next step (schedule times scale).
  virtual double learning_rate() const = 0;
  // Saves the run as a checkpoint in `dir` (resumable, loadable by eval and
  // predict) once every callback has seen this epoch, before fit()'s own
  // save; asked for in on_epoch_end. check_checkpoint_dir first says whether
  // it could (CheckpointError).
  virtual void save_checkpoint(const std::filesystem::path& dir) = 0;
  virtual void check_checkpoint_dir(const std::filesystem::path& dir) const = 0;
  // The epoch and figures of the checkpoint in `dir`; none where `dir` holds
  // none. Throws CheckpointError for one that cannot be read.
  virtual std::optional<SavedEpoch> saved_epoch(const std::filesystem::path& dir) const = 0;
  // The model's variables (not the optimizer's state) as they are now, and
  // back. Throws UnsupportedError where the run cannot (a job of several processes).
  virtual WeightSnapshot weights() = 0;
  virtual void set_weights(const WeightSnapshot& weights) = 0;
};

// What a callback has counted, by name ("wait", "best").
using CallbackCounts = std::map<std::string, double>;

class Callback {
 public:
  virtual ~Callback() = default;
  // Before the first step: check settings against the run (fail here, not after an epoch).
  virtual void on_train_begin(FitControl&) {}
  // After each epoch's validation, before its checkpoint.
  virtual void on_epoch_end(const EpochLog&, FitControl&) {}

  // Checkpoints keep what a callback has counted, so that a resumed run's
  // callback goes on from there rather than from scratch (as Keras' would):
  // state_key names the callback in the checkpoint ("early_stopping
  // val_loss min"; empty: it keeps nothing), counts() is what it has counted,
  // and resume_counts() puts that back, after on_train_begin, in a run
  // resumed from a checkpoint: empty counts where it holds none under the
  // key. It may stop training there (a run early stopping had ended).
  virtual std::string state_key() const { return {}; }
  virtual CallbackCounts counts() const { return {}; }
  virtual void resume_counts(const CallbackCounts&, FitControl&) {}
};

// How a monitored figure improves.
enum class MonitorMode { min, max };

struct EarlyStoppingOptions {
  std::string where;  // for errors: the config entry ("run.yaml:14:7: training.callbacks[0]"), if any
  std::string monitor = "val_loss";
  double min_delta = 0;
  std::int64_t patience = 0;
  std::string mode = "auto";  // auto, min, max
  bool restore_best_weights = false;
  std::int64_t start_from_epoch = 0;  // epochs before any counts
};

struct ModelCheckpointOptions {
  std::string where;  // for errors: the config entry ("run.yaml:14:7: training.callbacks[0]"), if any
  std::filesystem::path dir;
  std::string monitor = "val_loss";
  bool save_best_only = false;  // false: after every epoch
  std::string mode = "auto";
};

struct ReduceLROnPlateauOptions {
  std::string where;  // for errors: the config entry ("run.yaml:14:7: training.callbacks[0]"), if any
  std::string monitor = "val_loss";
  double factor = 0.1;
  std::int64_t patience = 10;
  double min_delta = 1e-4;
  std::int64_t cooldown = 0;
  double min_lr = 0;
  std::string mode = "auto";
};

std::shared_ptr<Callback> early_stopping(EarlyStoppingOptions options);
std::shared_ptr<Callback> model_checkpoint(ModelCheckpointOptions options);
std::shared_ptr<Callback> reduce_lr_on_plateau(ReduceLROnPlateauOptions options);
// One line per epoch: CSV (epoch, then the log's figures, learning_rate,
// seconds) or JSON lines. A run from epoch 1 replaces the file; a resumed run
// appends to it.
std::shared_ptr<Callback> csv_logger(std::filesystem::path path);
std::shared_ptr<Callback> json_logger(std::filesystem::path path);

// `training.callbacks`: throws ConfigError at the entry (unknown type or key, bad value).
std::vector<std::shared_ptr<Callback>> parse_callbacks(ConfigNode node);

}  // namespace tessera
