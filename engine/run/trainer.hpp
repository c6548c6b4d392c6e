// Trainer: fit / evaluate / predict with Keras' meaning, over a Model whose
// variables live in a VariableStore.
//
// Each batch size gets its own traced program (graph, autodiff, updates,
// memory plan), built on first use and reused: a steady-state step allocates
// no device memory. The optimizer step count and learning-rate schedule are
// shared by all programs, so a last partial batch trains like any other.
//
// Checkpoints (`training.checkpoint`) are saved at the end of epochs, and
// resume() continues a run from one: with the store loaded by load_checkpoint,
// fit() carries on at the saved step, epoch and batch, and ends with the very
// weights an uninterrupted run would have (engine/checkpoint/checkpoint.hpp
// says why that state suffices).
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "distribution/collectives/process_group.hpp"
#include "engine/checkpoint/checkpoint.hpp"
#include "engine/data/batch_iterator.hpp"
#include "engine/data/dataset.hpp"
#include "engine/graph/executor.hpp"
#include "engine/run/step_host.hpp"
#include "engine/training/callbacks.hpp"
#include "engine/training/fit_log.hpp"
#include "engine/training/loss.hpp"
#include "engine/training/metrics.hpp"
#include "engine/training/optimizer.hpp"
#include "engine/training/sample_weights.hpp"
#include "layers/model.hpp"

namespace tessera {

class Communicator;
class ConfigNode;
class Distribution;
class KeptCopies;
class SpmdProgram;

// `training.checkpoint: {dir: runs/x, every_epochs: 1}`: save to `dir` after
// every `every_epochs`-th epoch and after the last, each save replacing the one before.
// `training.checkpoint: false` turns saving off, also the `tessera` program's
// default folder (bin/run_folder.hpp).
struct CheckpointSpec {
  std::filesystem::path dir;  // empty: no checkpoints; resolved against the config's folder
  bool off = false;           // `checkpoint: false`
  std::int64_t every_epochs = 1;
  // The resolved config YAML stored with each checkpoint. parse_training sees
  // only `training:`, so the caller that holds the root fills this in.
  std::string resolved_config;
};

struct TrainingSpec {
  LossSpec loss;
  OptimizerSpec optimizer;
  std::vector<std::string> metrics;  // accuracy, top_<k>_accuracy, mae, ... (engine/training/metrics.hpp)
  std::int64_t epochs = 1;
  std::int64_t batch_size = 32;
  // `steps_per_epoch: N`: at most N batches an epoch (Keras' steps_per_epoch),
  // for quick runs on large data; 0: every batch.
  std::int64_t steps_per_epoch = 0;
  std::uint64_t seed = 0;
  bool shuffle = true;
  // `validation_split: 0.2`: fit() without validation data holds out the
  // last 20% of the training samples (before shuffling) and validates on
  // them after each epoch, as Keras does.
  double validation_split = 0;
  // `class_weight: {0: 1.0, 1: 5.0}`: fit() weighs each training sample's
  // loss by its class's weight (1 for classes not named), times the sample's
  // own weight (Dataset::weights). Its class is the sparse label, the first
  // largest entry of a one-hot target, or a binary target rounded.
  ClassWeights class_weight;
  CheckpointSpec checkpoint;
  // `precision: bf16`: the matmuls multiply in bf16 with f32 accumulation
  // (Graph::set_matmul_dtype); variables, optimizer state and every other op
  // stay f32. Training, evaluation and prediction alike.
  DType precision = DType::f32;
  // `callbacks:` (engine/training/callbacks.hpp): run by fit() after each epoch.
  std::vector<std::shared_ptr<Callback>> callbacks;
};

// `training:`; throws ConfigError (unknown keys, metrics, bad values).
TrainingSpec parse_training(ConfigNode node);

// After each batch of a pass that is not training (evaluate, predict): the
// batches done, of how many, and for evaluate the loss and metrics so far
// (over running.samples); predict's holds only samples.
using PassCallback = std::function<void(std::int64_t batch, std::int64_t batches, const Evaluation& running)>;

// Called after every training batch and at the end of every epoch.
struct FitCallbacks {
  std::function<void(std::int64_t epoch, std::int64_t batch, std::int64_t batches, const Evaluation& running)> on_batch;
  std::function<void(const EpochLog&)> on_epoch;
  // After each checkpoint save (which follows on_epoch).
  std::function<void(const std::filesystem::path& dir, const TrainingState&)> on_checkpoint;
  // Keras-style callbacks (early stopping, best checkpoints, ...), run after
  // on_epoch and after the spec's own; they may stop training or change the
  // learning rate (engine/training/callbacks.hpp).
  std::vector<std::shared_ptr<Callback>> callbacks;
  // Asked after every training step and after each validation pass: true
  // stops fit() there and saves that position as a checkpoint (where the run
  // saves any). Within an epoch that is between two batches, which resume()
  // continues from the next one; after an epoch's last batch the epoch ends
  // first (its validation, callbacks and save). `tessera train` answers it
  // from SIGINT, SIGTERM and SIGUSR1 (engine/run/interrupt.hpp). In a job of several
  // processes every process must answer alike at each step (a save is
  // collective): `tessera train` asks the job (InterruptCatcher::caught_by_job).
  std::function<bool()> interrupted;
};

class Trainer {
 public:
  // On one device: the store's tensors on a CPU; on a GPU, device copies of
  // them (sync_store() writes them back).
  Trainer(const Model& model, TrainingSpec spec, VariableStore& store, Device device = Device::cpu());
  // Over a host of the caller's making (engine/run/step_host.hpp).
  Trainer(const Model& model, TrainingSpec spec, VariableStore& store, std::unique_ptr<StepHost> host);
  // Runs every program over the distribution's mesh (one worker per device):
  // variables split as its layout map says, batches along its batch axis.
  // Losses, metrics and the weights sync_store() writes back are the
  // single-device run's, up to float rounding. A batch the batch axis does not
  // divide runs replicated.
  Trainer(const Model& model, TrainingSpec spec, VariableStore& store, const Distribution& distribution,
          ProcessGroup& processes = job_processes());
  ~Trainer();

  // Sharded and GPU runs keep the variables on the devices; this copies them
  // into the store. fit() does so at its end and before each checkpoint. A
  // deferring store of a job of several processes keeps its variables as the
  // devices' blocks (ShardedVariables::write_back).
  void sync_store();
  // The distribution's communicator (its accounting: bytes and time per
  // collective kind and mesh axis); null without a distribution.
  const Communicator* communicator() const;
  Communicator* communicator();
  // The partitioned training program for batches of `batch` (traced and
  // partitioned now if it was not yet, without running); null without a
  // distribution. For `tessera inspect`.
  const SpmdProgram* sharded_program(std::int64_t batch);
  // The partitioned program of a training step of `batch` with nothing bound
  // (no block drawn, no workspace allocated), to price or plan it
  // (device_memory, predict_step); null on one device.
  std::shared_ptr<const SpmdProgram> planned_program(std::int64_t batch);
  // How long a device waits for its peers in a collective before that is an error.
  void set_collective_timeout(std::chrono::milliseconds timeout);

  // Trains up to epoch spec.epochs: from epoch 1, or from where resume() said.
  // Returns the logs of the epochs it ran, numbered as in the whole run (3, 4
  // after resuming from a checkpoint of epoch 2); fewer when a callback
  // stopped training, and none of an epoch that callbacks.interrupted cut
  // short (state().batch then says where). Throws Error when the loss stops being finite,
  // CheckpointError when a checkpoint cannot be saved, ConfigError before the
  // first step when a callback monitors a figure the run does not log.
  // With training.validation_split, `validation` must be null: the split
  // is validated on (an Error otherwise). Samples weigh in the loss as their
  // Dataset::weights and training.class_weight say; validation samples as
  // their own weights only.
  std::vector<EpochLog> fit(const Dataset& train, const Dataset* validation, const FitCallbacks& callbacks = {});
  // The loss weighs samples by data.weights (no class_weight); metrics are unweighted, as Keras' `metrics`.
  Evaluation evaluate(const Dataset& data, const PassCallback& on_batch = {});
  // Model outputs for inputs [N, ...], batch by batch: [N, ...output].
  Tensor predict(const Tensor& inputs, const PassCallback& on_batch = {});

  // One optimizer step on one batch, as fit() takes each of its batches:
  // forward, loss, backward and update with the learning rate of step() (a
  // cosine schedule decays over the last fit()'s steps; before any fit() it
  // reaches its end right after warm-up), then step() + 1. `inputs` are
  // [N, ...] (viewed in the model's input shape, as fit views its data),
  // `targets` what the loss takes for N samples. Returns the batch's loss and
  // metrics (means over its N samples; samples == N). Throws Error when the
  // loss is not finite, after the update. The first call for a batch size
  // traces its program; later ones allocate nothing, so a benchmark can time
  // steps on a fixed batch. `sample_weights` ([N] f32, or undefined: all 1)
  // weigh each sample's loss.
  Evaluation train_step(const Tensor& inputs, const Tensor& targets, const Tensor& sample_weights = {});
  // The model's outputs for one batch of inputs [N, ...] in inference mode
  // (no loss, no gradients): a view into the program's memory, valid until the
  // next forward() or predict() with the same N. predict() runs this per batch.
  Tensor forward(const Tensor& inputs);

  // `data` as fit() and evaluate() run it: inputs in the model's input
  // dtype and shape, targets as the loss takes them, sample weights [N] f32
  // when it has any (times training.class_weight when `class_weighted`).
  // Throws ShapeError or DTypeError naming the data and the loss.
  Dataset model_data(const Dataset& data, bool class_weighted = false) {
    return model_dataset(data, /*evaluated=*/false, class_weighted);
  }

  std::int64_t step() const { return step_; }
  // For inference (make_trainer's TrainerUse::inference), before the first
  // forward pass: from then on the weights change only by load(), resume()
  // or changes to the store announced by weights_changed(), never by a step,
  // so forward passes on one device may multiply copies of them in a faster
  // layout (kept_copies()). fit() and train_step() then throw Error.
  void fix_weights() { weights_fixed_ = true; }
  // The store's values were changed by hand (load_checkpoint, a memcpy):
  // the runners take them (device copies, kept copies).
  void weights_changed();
  // The copies of fixed weights its programs multiply, to share with
  // another host over the same weights (an InferenceModel's decoders); null
  // on a mesh.
  std::shared_ptr<KeptCopies> kept_copies() const;
  // Accumulates per-op times of every program into `sink` (see Executor).
  void enable_profiling(std::map<std::string, StepRunner::OpTime>* sink);  // optimizer steps taken

  // Loads the checkpoint `dir` (either form, any mesh and process count) and
  // returns its state. One device reads it into the store; a sharded trainer
  // checks it against the store, then each device reads only its blocks'
  // slices. Throws CheckpointError (see load_checkpoint); on error nothing
  // changed. NaN or infinite values are refused unless `non_finite` allows them.
  TrainingState load(const std::filesystem::path& dir, NonFinite non_finite = NonFinite::refuse);

  // Makes the next fit() continue a run saved as `state` (the store must hold
  // the checkpoint's values, by load_checkpoint, or the trainer by load()): the step counter (Adam's bias
  // correction, the learning-rate schedule), then epoch state.epoch + 1 from
  // batch state.batch. Throws CheckpointError when the state's seed is not
  // spec.seed, as the data order would then differ from the saved run's.
  void resume(const TrainingState& state);
  // Where training stands: steps taken, epochs completed, batches into the next.
  TrainingState state() const;

 private:
  struct Program;
  class FitRun;  // what callbacks may do to a fit() (FitControl)
  // fit()'s own save: state() into training.checkpoint.dir, then on_checkpoint.
  void save_run(const FitCallbacks& callbacks);
  // What train_step throws for a non-finite loss: an Error naming the step,
  // which fit() re-throws naming the epoch and batch as well.
  struct NonFiniteLoss;
  // `weighted`: the loss takes a sample weight per sample.
  Program& program(std::int64_t batch, bool training, bool with_loss, bool weighted = false);
  // The step traced, with no runner made for it yet.
  std::unique_ptr<Program> traced_program(std::int64_t batch, bool training, bool with_loss, bool weighted = false);
  Tensor as_model_input(const Tensor& inputs, const std::string& label) const;  // label: as Dataset::label()
  // `data` as the model and its loss take it: inputs by as_model_input;
  // targets converted to the loss's dtype (class ids of any integer width,
  // integers as floats, floats holding whole numbers as class ids) and
  // viewed in its per-sample shape ([N] as [N, 1]); weights [N] f32 as
  // engine/training/sample_weights.hpp makes them. Throws ShapeError or
  // DTypeError naming the data and the loss, before any step runs.
  // `evaluated`: the data will be evaluated, so its program is made now;
  // `class_weighted`: training data, whose weights include training.class_weight.
  Dataset model_dataset(const Dataset& data, bool evaluated, bool class_weighted = false);
  // evaluate() over data model_dataset() made.
  Evaluation pass(const Dataset& data, const PassCallback& on_batch);
  // train_step on rows [first_row, ...) of a batch of n samples (all of them in one process).
  PassTotals run_step(const Tensor& inputs, const Tensor& targets, const Tensor& weights, std::int64_t n,
                      std::int64_t first_row);
  // Adds the loss and metric sums of `p`'s last run over a batch of `batch` samples.
  void accumulate(PassTotals& total, const Program& p, std::int64_t batch) const;
  // The loss and metrics of `totals`.
  Evaluation evaluation(const PassTotals& totals) const;

  const Model& model_;
  TrainingSpec spec_;
  VariableStore& store_;
  std::unique_ptr<StepHost> host_;  // declared before the programs, which refer to it (destroyed after)
  std::map<std::tuple<std::int64_t, bool, bool, bool>, std::unique_ptr<Program>> programs_;
  std::map<std::string, StepRunner::OpTime>* profile_ = nullptr;
  const std::vector<MetricOps>* metric_ops_ = nullptr;  // a cached program's, for evaluation()
  std::int64_t step_ = 0;
  bool weights_fixed_ = false;  // fix_weights()
  std::int64_t total_steps_ = 0;
  double learning_rate_scale_ = 1;  // a callback's factor on the schedule (ReduceLROnPlateau)
  std::map<std::string, double> last_figures_;  // the last whole epoch's logged figures (TrainingState::figures)
  PassTotals epoch_totals_;                      // the epoch fit() is in, summed so far
  std::optional<PassTotals> carried_totals_;     // resume(): the sums of the epoch it resumes in the middle of
  std::vector<std::shared_ptr<Callback>> fit_callbacks_;  // the last fit()'s, whose counts state() saves
  std::map<std::string, CallbackCounts> resumed_counts_;  // resume(): for the next fit()'s callbacks
  std::int64_t start_epoch_ = 0, start_batch_ = 0;    // where the next fit() begins (resume)
  std::int64_t epochs_done_ = 0, batches_done_ = 0;  // progress, for state()
};

}  // namespace tessera
