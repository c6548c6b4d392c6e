// StepHost: where a Trainer's traced steps run and its variables live.
//
// On one device (device_host) a step is an Executor over the store's own
// tensors (on a GPU over device copies of them, batches and outputs staged).
// On a distribution's mesh (mesh_host) a step is partitioned into an
// SpmdProgram, the variables live on the devices as blocks, and in a job of
// several processes each process loads only its devices' rows of a batch and
// saves only its devices' blocks. The Trainer asks its host for runners, rows
// and checkpoints, and never asks which kind of host it holds.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/checkpoint/checkpoint.hpp"
#include "engine/core/device.hpp"
#include "engine/data/batch_iterator.hpp"
#include "engine/graph/step_runner.hpp"
#include "engine/variable_store.hpp"

namespace tessera {

class Communicator;
class KeptCopies;
class Distribution;
class ProcessGroup;

// A traced step (forward, and for training loss, gradients and updates) and
// what a host needs to place it.
struct TracedStep {
  const Graph& graph;
  std::vector<ValueId> outputs;  // what its runner returns
  // The batch's leaves: target -1 without a loss, sample_weight -1 unless the loss weighs samples.
  ValueId input = -1, target = -1, sample_weight = -1;
  // The model's variables (their layouts come from the distribution), and
  // every leaf to bind from the store: those and the optimizer's state.
  std::vector<std::pair<std::string, ValueId>> model_variables, variables;
  // Each layer's output, by its layer path (a distribution may constrain its layout).
  std::vector<std::pair<std::string, ValueId>> layer_outputs;
  // The variables change only through load() and store_changed() (inference):
  // a one-device runner may multiply copies of them in a faster layout, kept
  // by the host (kept_copies()). A mesh's runners keep none yet.
  bool fixed_variables = false;
};

class StepHost {
 public:
  virtual ~StepHost() = default;

  // A runner for `step` with every variable bound; the step's graph must outlive it.
  virtual std::unique_ptr<StepRunner> runner(const TracedStep& step) = 0;
  // A runner for `step` with nothing bound, to price or plan it, not to run
  // it; null where the host has nothing to plan (one device).
  virtual std::unique_ptr<StepRunner> unbound_runner(const TracedStep&) { return nullptr; }
  // The rows of each batch this process loads; empty: all of them.
  virtual RowWindow row_window() const = 0;

  // Loads the checkpoint `dir` (either form, any mesh) and returns its state;
  // on error nothing changed (see load_checkpoint). NaN or infinite values
  // are refused unless `non_finite` allows them; a sharded host checks each
  // block as it reads it (blocks made later are read later).
  virtual TrainingState load(const std::filesystem::path& dir, NonFinite non_finite) = 0;
  // The store was given new values by someone else (load_checkpoint by hand):
  // the runners take them, unless load() already gave them a checkpoint's.
  virtual void store_changed() = 0;
  // Saves the variables and `state` as a checkpoint in `dir`.
  virtual void save(const std::filesystem::path& dir, const TrainingState& state, const std::string& config) = 0;
  // Copies the variables the runners updated into the store.
  virtual void sync_store() = 0;

  // The collectives between the devices (bytes and time per kind and mesh
  // axis, the timeout); null on one device.
  virtual Communicator* communicator() = 0;
  // The copies of fixed variables its runners multiply (TracedStep::fixed_variables),
  // dropped by load() and store_changed(); null where it keeps none (a mesh).
  virtual std::shared_ptr<KeptCopies> kept_copies() { return nullptr; }
  // Whether its devices run attention as kernels of their own
  // (Graph::set_attention_kernel): every device it runs has them.
  virtual AttentionKernelTest attention_kernel() const = 0;
};

// Backend::prefers_attention_op of `device`'s backend.
AttentionKernelTest attention_kernel_of(Device device);

// `residency` (engine/core/device.hpp): where the variables live between steps.
// `kept`: the copies of fixed variables, to share with another host whose
// store shares the weights' tensors (null: its own).
std::unique_ptr<StepHost> device_host(VariableStore& store, Device device, Residency residency = Residency::automatic,
                                      std::shared_ptr<KeptCopies> kept = nullptr);
// `processes`: the job's processes, for what they exchange on the host (rows, merges, barriers).
std::unique_ptr<StepHost> mesh_host(VariableStore& store, const Distribution& distribution, ProcessGroup& processes,
                                    Residency residency = Residency::automatic);

}  // namespace tessera
