// Checkpoints: a directory holding everything a run needs to continue.
//
//   runs/x/model.safetensors      the model's variables, named by path ("mlp/dense/kernel")
//   runs/x/optimizer.safetensors  the optimizer state ("optimizer/mlp/dense/kernel/m")
//   runs/x/training_state.json    step, epochs completed, batch position, seed, format
//                                 version, the resolved config YAML, and the model's
//                                 fingerprint (every variable's path, shape and dtype);
//                                 the learning-rate factor of reduce_lr_on_plateau,
//                                 the last epoch's logged figures and, saved
//                                 mid-epoch, that epoch's sums so far
//
// Why these few numbers suffice to resume bit-identically: initial values come
// from the config's seed (and are overwritten by the checkpoint anyway), and the
// data order of an epoch is a pure function of (seed, epoch) (epoch_order), so
// (seed, epoch, batch) finds the next batch without any saved RNG state; the
// step counter restores Adam's bias correction and the learning-rate schedule.
// A layer that draws random numbers while training must likewise key them on
// (seed, step), never on state that lives only in memory.
//
// A job of several processes writes a sharded checkpoint instead of the two
// safetensors files: each process writes the blocks its devices hold into its
// own file, and an index says which file holds which slice of each tensor
// (engine/checkpoint/sharded_checkpoint.hpp):
//
//   runs/x/model.safetensors.index.json          tensor -> file, slice
//   runs/x/model-00001-of-00002.safetensors      process 0's blocks (model and optimizer)
//   runs/x/training_state.json                   as above
//
// load_checkpoint reads either form, so a checkpoint saved on one mesh and
// process count loads on any other (or one device).
//
// A checkpoint is written into a temporary sibling directory and renamed into
// place only when complete, replacing an older checkpoint at the same path:
// after a crash, `dir` holds the old checkpoint or the new one, never a mix.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/checkpoint/non_finite.hpp"
#include "engine/checkpoint/sharded_checkpoint.hpp"

#include "engine/variable_store.hpp"

namespace tessera {

// The version written into training_state.json; loading a newer one fails.
inline constexpr int kCheckpointFormatVersion = 1;

// Whether a store path is optimizer state ("optimizer/<param>/<slot>"), not a model variable.
inline bool is_optimizer_state(const std::string& path) { return path.rfind("optimizer/", 0) == 0; }

// What the epoch a checkpoint was saved in the middle of had summed so far
// (the fields of PassTotals), so that the resumed run logs that epoch whole.
struct EpochSums {
  double loss = 0;  // each batch's loss times its samples
  std::int64_t samples = 0;
  std::vector<std::vector<std::vector<double>>> metrics;  // [metric][sum][element]
};

// Where a run stands. The batch position is BatchIterator::Position{epoch, batch}.
struct TrainingState {
  std::int64_t step = 0;   // optimizer steps taken
  std::int64_t epoch = 0;  // epochs completed: the next batch belongs to epoch + 1 (1-based)
  std::int64_t batch = 0;  // batches of that next epoch already trained (0 after a whole epoch)
  std::uint64_t seed = 0;  // training.seed: with epoch and batch, it fixes the data still to come
  std::string config;      // the run's resolved config YAML; filled by load_checkpoint
  // A callback's factor on the schedule's learning rate (reduce_lr_on_plateau),
  // which a resumed run keeps, as Keras keeps a reduced rate in its optimizer.
  double learning_rate_scale = 1;
  // The last whole epoch's logged figures by name ("loss", "val_accuracy"), the
  // finite ones: what model_checkpoint's save_best_only compares a resumed run's
  // epochs against. Empty before the first epoch (and in checkpoints written
  // before these were kept, which load with a factor of 1).
  std::map<std::string, double> figures;
  // Saved mid-epoch (batch > 0): that epoch's sums over its first `batch` batches.
  std::optional<EpochSums> epoch_sums;
  // What the run's callbacks had counted (epochs waited, cooldown, the best
  // figure) by their keys (Callback::state_key, engine/training/callbacks.hpp),
  // so that a resumed run's early stopping and learning-rate reduction go on
  // counting. Empty in checkpoints written before these were kept.
  std::map<std::string, std::map<std::string, double>> callbacks;
};

// Writes the store's variables and `state` to `dir` (created with its parents),
// replacing an earlier checkpoint there only once the new one is complete. The
// store's variables must be defined host tensors. A `dir` that exists but is
// neither empty nor a checkpoint is not replaced. Throws CheckpointError (the
// old checkpoint, if any, is then untouched).
void save_checkpoint(const std::filesystem::path& dir, const VariableStore& store,
                     const TrainingState& state, const std::string& resolved_config);

// Throws the CheckpointError a save into `dir` would throw for the directory
// itself (not a checkpoint, a file, a folder inside it), creating nothing but
// its parent: for a run to check before it trains, not after its first epoch.
void check_checkpoint_dir(const std::filesystem::path& dir);

// One process's part of a sharded checkpoint: every process calls
// save_checkpoint with the same dir, state and index at once.
struct ShardedSave {
  int writer = 0, writers = 1;     // this process, and how many write
  std::vector<ShardBlock> blocks;  // what this process writes
  ShardIndex index;                // every process's blocks (writer 0 writes it)
  // Both return once every writer has called them. `meet` is where the
  // writers arrive from training: a writer that never comes (stopped, stuck)
  // is caught as soon as a collective would catch it. `barrier` follows file
  // I/O, which may take far longer. Without `meet`, `barrier` serves both.
  std::function<void()> meet;
  std::function<void()> barrier;
};

// The same, sharded: the store supplies only the variables' paths, shapes and
// dtypes (for training_state.json); the values are the blocks'. Writer 0
// prepares the scratch directory, installs it and reports its errors; another
// writer's failure ends the job (its error names it), so no barrier waits
// for ever in a job of several processes.
void save_checkpoint(const std::filesystem::path& dir, const VariableStore& store, const TrainingState& state,
                     const std::string& resolved_config, const ShardedSave& sharded);

// Loads `dir` into `store` and returns its TrainingState. Everything is read
// and checked before anything is written: every file present and well-formed,
// every model variable of the store in the checkpoint with the same shape and
// dtype and no variable in the checkpoint that the model lacks (so a checkpoint
// of another model fails, naming the first variable that differs and its
// shapes). Optimizer state the store does not hold yet (a trainer creates it
// when it first traces a training step) is added to it, as variables the
// trainer then finds; state it already holds must match. Values are copied
// into the store's existing tensors, so executors bound to them see them.
// Throws CheckpointError naming the file or variable; on error the store is
// unchanged.
//
// With LoadValues::none everything is checked but no value is read: the
// store keeps its values (and optimizer state it lacked is added as zeros),
// for a caller that then reads only the slices it needs (checkpoint_index,
// read_tensor_slice), as a sharded trainer does, checking them with
// check_finite itself.
//
// Values read that are NaN or infinite are refused (CheckpointError naming
// the tensor and the first such element) unless `non_finite` allows them.
enum class LoadValues { all, none };
TrainingState load_checkpoint(const std::filesystem::path& dir, VariableStore& store,
                              LoadValues values = LoadValues::all, NonFinite non_finite = NonFinite::refuse);

// The TrainingState of the checkpoint in `dir` (either form) without reading
// its tensors, config included. Throws CheckpointError as load_checkpoint.
TrainingState read_training_state(const std::filesystem::path& dir);

// When `model` (a model's variable paths) and `saved` (a checkpoint's) are
// the same paths under another first component ("old/dense/kernel" against
// "new/dense/kernel"): a sentence saying the model was renamed and how to
// load the checkpoint anyway; else "". Optimizer state is left out.
std::string renamed_model_hint(const std::vector<std::string>& model, const std::vector<std::string>& saved);

// What verify_checkpoint found in a checkpoint it could read whole.
struct CheckpointReport {
  std::size_t files = 0;        // safetensors files
  std::size_t tensors = 0;      // variables and optimizer state
  std::size_t blocks = 0;       // stored pieces of them (a tensor per block unless sharded)
  std::size_t checksummed = 0;  // blocks whose CRC-32 was recorded, and matched
  std::uint64_t bytes = 0;      // of tensor data
  std::vector<std::string> non_finite;  // "path: N of M values are NaN or infinite (the first at element I)"
};

// `tessera verify`: checks the checkpoint `dir` of either form as a load
// would (training_state.json, its fingerprints, the index and every file's
// header), then reads every tensor whole, one at a time, checking every
// recorded checksum. Throws CheckpointError naming the file and tensor at the
// first damage; tensors holding NaN or infinities (which loads refuse
// unless asked) are listed. `progress` hears of each tensor read.
CheckpointReport verify_checkpoint(const std::filesystem::path& dir, const CheckpointProgress& progress = {});

// Where each tensor of the checkpoint `dir` lies, for either form: a sharded
// checkpoint's index, or one whole block per tensor of model.safetensors and
// optimizer.safetensors. Reads headers only.
ShardIndex checkpoint_index(const std::filesystem::path& dir);

}  // namespace tessera
