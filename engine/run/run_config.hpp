// A run config: one YAML file with `model:`, `training:`, `data:` and `distribution:`
// (distribution/distribution_config.hpp), loaded with `--set` overrides applied and
// every section validated. `model:` may name a zoo file instead
// (`model: ../models/mlp.yaml`), whose own `model:` is used.
//
//   data:
//     train: {type: idx, images: train-images-idx3-ubyte.gz, labels: train-labels-idx1-ubyte.gz}
//     validation: {type: idx, images: ..., labels: ...}    # evaluated after each epoch
//
// Data types: idx (images, labels), csv (path, label_column, weight_column,
// header), npz (path, inputs, targets, weights), text (path, context, stride, split: train|validation,
// validation_fraction), synthetic (samples, shape, classes, seed). Relative
// paths resolve against the config file's folder.
//
//   device: cuda:0    # a run without distribution: on this device (default cpu);
//                     # a mesh names its devices in distribution.devices
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "distribution/collectives/process_group.hpp"
#include "distribution/distribution_config.hpp"
#include "engine/config/config.hpp"
#include "engine/data/dataset.hpp"
#include "engine/run/trainer.hpp"
#include "layers/model.hpp"

namespace tessera {

struct RunConfig {
  ConfigNode root;
  Model model;
  TrainingSpec training;      // defaults when the file has no `training:` (a zoo model)
  bool has_training = false;
  std::optional<ConfigNode> train_data, validation_data;
  std::optional<DistributionConfig> distribution;  // `distribution:`; none: one device
  Device device = Device::cpu();  // `device:` (cpu, cuda:N), the one device of a run without distribution
};

// A trainer for the run: over the distribution's mesh when the config has one
// (builds the model's variables in `store` and checks each against the layout
// map: a ConfigError at the entry that does not fit). In a job of several
// processes the store defers its values (VariableStore::defer_values): each
// device draws only its block of a variable, and no process holds the whole,
// so leave `store` empty for make_trainer to build.
// With type auto_tp the plan is made here, into run.distribution. The
// logical CPU devices of the mesh are made here; `processes` (the job's by
// default) share type auto's choice and the trainer's host-side exchanges.
// For training (`use`), a batch_size the batch axis does not divide is a
// ConfigError naming both; inference takes batches of any size (those the
// axis does not divide run replicated).
enum class TrainerUse { training, inference };
std::unique_ptr<Trainer> make_trainer(RunConfig& run, VariableStore& store, ProcessGroup& processes = job_processes(),
                                      TrainerUse use = TrainerUse::training);

// Loads and validates a run config; `overrides` are "a.b=c" assignments.
RunConfig load_run_config(const std::filesystem::path& file, const std::vector<std::string>& overrides = {});

// Loads the dataset a `data.<split>` node describes, its inputs multiplied by
// input_rescale(spec); throws ConfigError or DataError.
Dataset load_dataset(ConfigNode spec);

// The factor a `data.<split>` node's inputs are multiplied by before the
// model sees them: its `rescale:` (a number, or a fraction as "1/255"); by
// default 1/255 for IDX images (bytes to [0, 1], as Keras' MNIST examples
// do) and 1 for other data. Integer inputs rescaled become floats. Throws
// ConfigError at the key.
double input_rescale(const ConfigNode& spec);
// "1/255", "0.5": a factor as a person would write it.
std::string rescale_text(double factor);
// The same preprocessing for inputs that come without a config's data (tessera
// predict's files): times `factor`, integers becoming floats unless it is 1.
Tensor rescaled(const Tensor& inputs, double factor);

}  // namespace tessera
