// The StepHost of a distribution's mesh: each step partitioned into an
// SpmdProgram over the devices, the variables kept as the devices' blocks
// (device copies of host blocks on GPUs, written back on sync and save).
#include <algorithm>
#include <map>

#include "distribution/spmd_program.hpp"
#include "engine/run/step_host.hpp"

namespace tessera {
namespace {

class MeshHost final : public StepHost {
 public:
  MeshHost(VariableStore& store, const Distribution& distribution, ProcessGroup& processes, Residency residency)
      : store_(store),
        distribution_(distribution),
        runtime_(distribution_, processes, residency),
        blocks_(distribution_.mesh(), runtime_.local_ranks(), store, runtime_.keeps_copies()) {}

  std::unique_ptr<StepRunner> runner(const TracedStep& step) override {
    auto program = partitioned(step);
    for (const auto& [path, id] : step.variables) program->bind_blocks(id, blocks_.blocks(path, program->sharding(id)));
    return program;
  }

  std::unique_ptr<StepRunner> unbound_runner(const TracedStep& step) override { return partitioned(step); }

  // Every local device must have the kernels: one program runs on all of
  // them. (The processes of a job are taken to have GPUs of one kind.)
  AttentionKernelTest attention_kernel() const override {
    std::vector<AttentionKernelTest> tests;
    for (int rank : runtime_.local_ranks())
      tests.push_back(attention_kernel_of(distribution_.mesh().devices()[static_cast<std::size_t>(rank)]));
    return [tests](DType operands, DType out, std::int64_t width) {
      return std::all_of(tests.begin(), tests.end(), [&](const AttentionKernelTest& t) { return t(operands, out, width); });
    };
  }
  RowWindow row_window() const override {
    if (!distribution_.placement().multi_process()) return {};
    return [this](std::int64_t size) { return process_rows(size); };
  }

  TrainingState load(const std::filesystem::path& dir, NonFinite non_finite) override {
    TrainingState state = load_checkpoint(dir, store_, LoadValues::none);  // checked; nothing read yet
    blocks_.read_from(dir, non_finite);
    loaded_ = true;
    return state;
  }
  void store_changed() override {
    if (!loaded_) blocks_.reload();
    loaded_ = false;
  }
  void save(const std::filesystem::path& dir, const TrainingState& state, const std::string& config) override {
    if (!distribution_.placement().multi_process()) {
      sync_store();
      return save_checkpoint(dir, store_, state, config);
    }
    // Each process writes its devices' blocks: nothing is gathered. The
    // processes arrive from training within a collective's timeout; file I/O
    // may take far longer, so the barriers after it wait longer.
    ShardedSave save = blocks_.sharded_save(distribution_.placement());
    const auto timeout = runtime_.comm().timeout();
    const auto io_timeout = std::max<std::chrono::milliseconds>(timeout, std::chrono::minutes(30));
    save.meet = [timeout, &processes = runtime_.processes()] { processes.barrier(timeout); };
    save.barrier = [io_timeout, &processes = runtime_.processes()] { processes.barrier(io_timeout); };
    save_checkpoint(dir, store_, state, config, save);
  }
  void sync_store() override { blocks_.write_back(runtime_.processes(), runtime_.comm().timeout()); }
  Communicator* communicator() override { return &runtime_.comm(); }

 private:
  // The step partitioned over the mesh: each variable, batch and layer output
  // split as the distribution lays it out; nothing bound yet.
  std::unique_ptr<SpmdProgram> partitioned(const TracedStep& step) {
    const Graph& g = step.graph;
    const DeviceMesh& mesh = distribution_.mesh();
    std::map<ValueId, Sharding> shardings, constraints;
    for (const auto& [path, id] : step.model_variables)
      shardings[id] = Sharding::from_layout(distribution_.variable_layout(path, g.shape(id)).layout, mesh);
    // Batches split along the batch axis when it divides them (a last partial batch may not).
    const bool split_batch = splits(g.shape(step.input)[0]);
    for (ValueId data : {step.input, step.target, step.sample_weight}) {
      if (data < 0 || !split_batch) continue;
      shardings[data] = Sharding::from_layout(distribution_.data_layout(g.shape(data).rank()), mesh);
    }
    for (const auto& [path, value] : step.layer_outputs) {
      try {
        if (auto layout = distribution_.tensor_layout(path, g.shape(value)))
          constraints[value] = Sharding::from_layout(*layout, mesh);
      } catch (const LayoutError&) {
        // A batch the batch axis does not divide runs replicated, activations too;
        // with a divisible batch a layout that does not fit is the user's error.
        if (split_batch) throw;
      }
    }
    const int zero_axis = distribution_.zero() ? mesh.axis_index(distribution_.batch_dim_name()) : -1;
    return std::make_unique<SpmdProgram>(g, step.outputs, runtime_, shardings, constraints, zero_axis);
  }
  // Whether a batch of `size` splits along the batch axis.
  bool splits(std::int64_t size) const {
    return size % distribution_.mesh().axis_size(distribution_.batch_dim_name()) == 0;
  }
  // The rows of a batch of `size` that this process's devices train on: as
  // runner() splits batches.
  std::pair<std::int64_t, std::int64_t> process_rows(std::int64_t size) const {
    if (!splits(size)) return {0, size};
    const DeviceMesh& mesh = distribution_.mesh();
    return Sharding::from_layout(distribution_.data_layout(1), mesh).rows_held(Shape{size}, mesh, runtime_.local_ranks());
  }

  VariableStore& store_;
  const Distribution distribution_;  // a copy: the runtime and every program refer to it
  SpmdRuntime runtime_;
  ShardedVariables blocks_;
  bool loaded_ = false;  // load() gave the blocks a checkpoint's values
};

}  // namespace

std::unique_ptr<StepHost> mesh_host(VariableStore& store, const Distribution& distribution, ProcessGroup& processes,
                                    Residency residency) {
  return std::make_unique<MeshHost>(store, distribution, processes, residency);
}

}  // namespace tessera
