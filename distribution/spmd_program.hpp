// SpmdProgram: a global graph partitioned over a Distribution's mesh and run
// by one executor per device, all at once (one worker thread each).
//
//   SpmdRuntime runtime(distribution);               // communicator, workers
//   SpmdProgram program(graph, {loss}, runtime, leaf_shardings);
//   program.bind(x, batch);                          // split as x's sharding says
//   program.bind_blocks(w, blocks);                  // one block per device
//   program.run();
//   program.output(loss);                            // replicated: device 0's copy
//
// ShardedVariables holds the devices' blocks of a VariableStore's variables,
// shared by every program of a trainer, and writes them back on request.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distribution/collectives/communicator.hpp"
#include "distribution/collectives/process_group.hpp"
#include "distribution/device_workers.hpp"
#include "distribution/distribution.hpp"
#include "distribution/partitioner.hpp"
#include "distribution/spmd_context.hpp"
#include "engine/graph/executor.hpp"
#include "engine/checkpoint/checkpoint.hpp"
#include "engine/variable_store.hpp"

namespace tessera {

// What the programs of one distribution share: the communicator between its
// devices, their worker threads and their collective contexts. In a job of
// several processes (the distribution's placement) it runs this process's
// devices only, and the communicator reaches the others over MPI.
class SpmdRuntime {
 public:
  // Throws UnsupportedError for a mesh of several kinds of device, a mesh of
  // GPUs in a build without NCCL, and several processes in a build without MPI.
  // `processes`: the job's processes, for host-side exchanges (write_back's merge, checkpoint barriers).
  // `residency`: Residency::device makes a mesh of CPU devices keep device
  // copies as a GPU mesh does (engine/core/device.hpp).
  explicit SpmdRuntime(const Distribution& distribution, ProcessGroup& processes = job_processes(),
                       Residency residency = Residency::automatic);
  ~SpmdRuntime();

  const Distribution& distribution() const { return distribution_; }
  const DeviceMesh& mesh() const { return distribution_.mesh(); }
  Communicator& comm() { return *comm_; }
  ProcessGroup& processes() { return processes_; }
  DeviceWorkers& workers() { return *workers_; }
  const SpmdContext& context(int rank) const { return contexts_[static_cast<std::size_t>(rank)]; }
  // The mesh ranks this process runs, ascending; a rank's position among them.
  const std::vector<int>& local_ranks() const { return local_ranks_; }
  std::size_t local_index(int rank) const;
  // Whether the devices keep device copies (a GPU mesh, or Residency::device):
  // the variables' blocks live on the devices, batches are copied in and
  // outputs out, and the host touches only its own copies.
  bool keeps_copies() const { return keeps_copies_; }

 private:
  const Distribution& distribution_;
  ProcessGroup& processes_;
  bool keeps_copies_;
  std::vector<int> local_ranks_;
  std::unique_ptr<Communicator> comm_;
  std::vector<SpmdContext> contexts_;  // by mesh rank
  std::unique_ptr<DeviceWorkers> workers_;
};

class ShardedVariables {
 public:
  // The blocks of the devices in `local_ranks` (all of the mesh's in one
  // process). With `device_copies` each block is a device copy of a host
  // block: filled from it, and read back into it before the host reads.
  ShardedVariables(const DeviceMesh& mesh, std::vector<int> local_ranks, VariableStore& store, bool device_copies = false)
      : mesh_(mesh), local_ranks_(std::move(local_ranks)), store_(store), device_copies_(device_copies) {}
  // This process's devices' blocks of variable `path` split as `sharding` (in
  // local_ranks order), made from the store's value on first use. Throws
  // LayoutError when asked for another sharding.
  const std::vector<Tensor>& blocks(const std::string& path, const Sharding& sharding);
  // Copies the blocks back into the store's tensors (for checkpoints, tests
  // and the end of fit). With several processes each fills in the blocks it
  // holds and the processes merge the rest, so every store ends up whole (a
  // collective call of every process, which waits up to `timeout` for the
  // others); but a deferred variable (VariableStore::defer_values) stays as
  // the devices' blocks there, which is what deferring is for.
  void write_back(ProcessGroup& processes, std::chrono::milliseconds timeout);
  // Copies the store's values into the blocks (after a checkpoint load).
  void reload();
  // Makes the checkpoint `dir` the source of every block, now and when made
  // later: each device reads only its block's slice, from only the files that
  // hold it (resharding whatever mesh and process count saved it). The
  // store's values are stale until write_back() (deferred ones of several
  // processes stay so); variables no program holds
  // are read whole at the first write_back() or sharded_save(), which then
  // forget the checkpoint (a save may replace it). Each block read is
  // refused (CheckpointError) when it holds NaN or infinities, unless
  // `non_finite` allows them; the blocks held now are all checked before
  // any changes, so a refused load leaves them and the source as they were.
  void read_from(const std::filesystem::path& dir, NonFinite non_finite = NonFinite::refuse);
  // This process's part of a sharded checkpoint: the blocks whose first copy
  // its devices hold (each block of the mesh is written once), whole store
  // variables that no program holds (by process 0), and every process's index.
  ShardedSave sharded_save(const ProcessPlacement& where);

 private:
  struct Entry {
    Sharding sharding;
    std::vector<Tensor> blocks;       // what the programs bind, on the devices
    std::vector<Tensor> host_blocks;  // what the host reads and writes: `blocks` themselves without device copies
  };
  // Fills `entry`'s blocks from the checkpoint source.
  void read_blocks(const std::string& path, Entry& entry);
  // Reads device `rank`'s block of `path` split as `sharding` into `out`,
  // refusing NaN or infinities unless `non_finite` allows them.
  void read_block(CheckpointReader& reader, NonFinite non_finite, const std::string& path, const Sharding& sharding,
                  int rank, const Tensor& out) const;
  // Device copies: host blocks -> blocks (after the host wrote them), and back
  // (before the host reads them). No-ops without device copies.
  void upload(Entry& entry) const;
  void download();
  // Where device `rank`'s host block lives: the host, or the device itself
  // when the host can read it (logical CPU devices without copies).
  Device host_device(int rank) const;
  // Copies the source's values of variables that no program holds into the
  // store, then forgets the source (before a save may replace it).
  void detach_source();

  std::optional<CheckpointReader> source_;  // a checkpoint the blocks come from; none: the store
  NonFinite source_non_finite_ = NonFinite::refuse;
  const DeviceMesh& mesh_;
  std::vector<int> local_ranks_;
  VariableStore& store_;
  bool device_copies_;
  std::map<std::string, Entry> entries_;
};

class SpmdProgram final : public StepRunner {
 public:
  SpmdProgram(const Graph& global, const std::vector<ValueId>& outputs, SpmdRuntime& runtime,
              const std::map<ValueId, Sharding>& leaf_shardings, const std::map<ValueId, Sharding>& constraints = {},
              int zero_axis = -1);
  // The executors refer to partition().local.
  SpmdProgram(const SpmdProgram&) = delete;
  SpmdProgram& operator=(const SpmdProgram&) = delete;

  const Graph& global() const { return global_; }
  const DeviceMesh& mesh() const { return runtime_.mesh(); }
  // The per-device graph's nodes one run executes, in order.
  const std::vector<NodeId>& schedule() const { return executors_[0]->plan().schedule; }
  const Partition& partition() const { return partition_; }
  // The collectives one run performs per device, in order (those feeding an
  // output or an update; the partition may hold dead ones the executor skips).
  const std::vector<PlannedCollective>& collectives() const { return live_collectives_; }
  // Bytes of device `rank`'s step workspace (activations, gradients,
  // temporaries: its memory plan's arena); `rank` must be this process's.
  std::int64_t workspace_bytes(int rank) const;
  // The mesh ranks this process runs.
  const std::vector<int>& local_ranks() const { return runtime_.local_ranks(); }
  const Sharding& sharding(ValueId global) const { return partition_.sharding[static_cast<std::size_t>(global)]; }

  // Binds a whole tensor to a global input or variable: each device gets its
  // block (a view of an input when only the first dimension is split, as
  // batches are; a copy of a variable, which each device updates).
  void bind(ValueId leaf, const Tensor& whole) override;
  // Binds rows [first_row, first_row + rows.shape()[0]) of a global input
  // whose first dimension alone is split (a batch), as a process of a job of
  // several holds them: they must cover local_rows(leaf).
  void bind_rows(ValueId leaf, const Tensor& rows, std::int64_t first_row) override;
  // The rows of `leaf` that this process's devices need: all of them unless
  // the first dimension alone is split.
  std::pair<std::int64_t, std::int64_t> local_rows(ValueId leaf) const;
  // Binds each of this process's devices' block (local_ranks order) to a global input or variable.
  void bind_blocks(ValueId leaf, const std::vector<Tensor>& blocks);
  void run() override;
  // A requested output (replicated on every device): the copy of this
  // process's first device, valid until the next run.
  Tensor output(ValueId global) const override;

  void set_update_step(std::int64_t step, float learning_rate) override;
  // Per-op times of this process's first device (each device runs the same ops).
  void enable_profiling(std::map<std::string, OpTime>* sink) override;

 private:
  ValueId local(ValueId global) const;

  const Graph& global_;
  SpmdRuntime& runtime_;
  Partition partition_;
  std::vector<ValueId> outputs_;
  // This process's devices, in local_ranks order: the runners take batches
  // (staged onto devices that keep copies), the executors the variables' blocks.
  std::vector<std::unique_ptr<StepRunner>> runners_;
  std::vector<Executor*> executors_;
  std::vector<PlannedCollective> live_collectives_;
};

}  // namespace tessera
