#include "distribution/spmd_program.hpp"

#include <algorithm>
#include <cstring>
#include <set>

#include "distribution/collectives/shm_communicator.hpp"
#include "distribution/shard_copy.hpp"

namespace tessera {
namespace {

// The shared-memory communicator and the block copies work in host memory;
// GPU meshes come with the NCCL communicator.
const Distribution& check_cpu(const Distribution& distribution) {
  for (const auto& d : distribution.mesh().devices())
    if (d.kind != DeviceKind::cpu)
      throw UnsupportedError("sharded execution runs on logical CPU devices (cpu:N) for now; the mesh has " + d.str() +
                             " (GPU meshes need the NCCL communicator, not built yet)");
  return distribution;
}

}  // namespace

SpmdRuntime::SpmdRuntime(const Distribution& distribution)
    : distribution_(check_cpu(distribution)), comm_(std::make_unique<ShmCommunicator>(static_cast<int>(distribution.mesh().size()))) {
  for (std::int64_t rank = 0; rank < mesh().size(); ++rank) contexts_.emplace_back(mesh(), *comm_, static_cast<int>(rank));
  workers_ = std::make_unique<DeviceWorkers>(static_cast<int>(mesh().size()), comm_.get());
}

SpmdRuntime::~SpmdRuntime() = default;

const std::vector<Tensor>& ShardedVariables::blocks(const std::string& path, const Sharding& sharding) {
  auto it = entries_.find(path);
  if (it != entries_.end()) {
    if (!(it->second.sharding == sharding))
      throw LayoutError("variable '" + path + "' is split as " + it->second.sharding.str(mesh_) +
                        " by one program and as " + sharding.str(mesh_) + " by another");
    return it->second.blocks;
  }
  const Variable* v = store_.find(path);
  if (v == nullptr) throw Error("sharded variables: the store has no variable '" + path + "'");
  Entry entry{sharding, {}};
  for (std::int64_t rank = 0; rank < mesh_.size(); ++rank) {
    try {
      entry.blocks.push_back(extract_block(v->value, sharding, mesh_, static_cast<int>(rank),
                                           mesh_.devices()[static_cast<std::size_t>(rank)]));
    } catch (const OutOfMemoryError& e) {
      throw OutOfMemoryError("variable '" + path + "' (its block " + sharding.local_shape(v->value.shape(), mesh_).str() +
                             " as " + sharding.str(mesh_) + "): " + e.what());
    }
  }
  return entries_.emplace(path, std::move(entry)).first->second.blocks;
}

void ShardedVariables::write_back() const {
  for (const auto& [path, entry] : entries_) {
    const Variable* v = store_.find(path);
    // Devices that differ only along axes the variable is not split on hold
    // equal copies; writing each is simpler than picking one.
    for (std::int64_t rank = 0; rank < mesh_.size(); ++rank)
      insert_block(entry.blocks[static_cast<std::size_t>(rank)], v->value, entry.sharding, mesh_, static_cast<int>(rank));
  }
}

void ShardedVariables::reload() {
  for (auto& [path, entry] : entries_)
    for (std::int64_t rank = 0; rank < mesh_.size(); ++rank)
      extract_block_into(store_.find(path)->value, entry.sharding, mesh_, static_cast<int>(rank),
                         entry.blocks[static_cast<std::size_t>(rank)]);
}

SpmdProgram::SpmdProgram(const Graph& global, const std::vector<ValueId>& outputs, SpmdRuntime& runtime,
                         const std::map<ValueId, Sharding>& leaf_shardings, const std::map<ValueId, Sharding>& constraints,
                         int zero_axis)
    : global_(global), runtime_(runtime), partition_(tessera::partition(global, outputs, runtime.mesh(), leaf_shardings, constraints, zero_axis)), outputs_(outputs) {
  const DeviceMesh& mesh = runtime.mesh();
  for (std::int64_t rank = 0; rank < mesh.size(); ++rank) {
    auto exec = std::make_unique<Executor>(partition_.local, partition_.outputs, mesh.devices()[static_cast<std::size_t>(rank)]);
    exec->set_spmd(&runtime.context(static_cast<int>(rank)));
    executors_.push_back(std::move(exec));
  }
  const auto& schedule = executors_[0]->plan().schedule;
  std::set<NodeId> scheduled(schedule.begin(), schedule.end());
  for (const auto& c : partition_.collectives)
    if (scheduled.contains(partition_.local.value(c.local).producer)) live_collectives_.push_back(c);
}

std::int64_t SpmdProgram::workspace_bytes(int rank) const {
  return static_cast<std::int64_t>(executors_[static_cast<std::size_t>(rank)]->plan().arena_bytes);
}

ValueId SpmdProgram::local(ValueId global) const {
  if (global < 0 || static_cast<std::size_t>(global) >= partition_.local_of.size() || partition_.local_of[static_cast<std::size_t>(global)] < 0)
    throw GraphError("spmd program: value %" + std::to_string(global) + " is not in the partitioned graph");
  return partition_.local_of[static_cast<std::size_t>(global)];
}

void SpmdProgram::bind(ValueId leaf, const Tensor& whole) {
  const DeviceMesh& mesh = runtime_.mesh();
  const ValueId local_leaf = local(leaf);  // checks the id
  const Sharding& s = sharding(leaf);
  if (whole.shape() != global_.shape(leaf))
    throw ShapeError("bind: '" + global_.value(leaf).name + "' expects shape " + global_.shape(leaf).str() + ", got " +
                     whole.describe());
  // Variables are updated in place: each device needs its own copy.
  const bool copy = global_.node(global_.value(leaf).producer).kind == OpKind::variable;
  const bool inner_split = s.rank() > 1 && std::any_of(s.dims.begin() + 1, s.dims.end(), [](int a) { return a != Sharding::kNone; });
  for (std::int64_t rank = 0; rank < mesh.size(); ++rank) {
    Executor& exec = *executors_[static_cast<std::size_t>(rank)];
    if (inner_split || copy) {
      exec.bind(local_leaf, extract_block(whole, s, mesh, static_cast<int>(rank), mesh.devices()[static_cast<std::size_t>(rank)]));
    } else if (s.rank() > 0 && s.dims[0] != Sharding::kNone) {
      std::int64_t rows = s.local_shape(whole.shape(), mesh)[0];
      exec.bind(local_leaf, whole.rows(s.block_start(whole.shape(), mesh, rank)[0], rows));
    } else {
      exec.bind(local_leaf, whole);
    }
  }
}

void SpmdProgram::bind_blocks(ValueId leaf, const std::vector<Tensor>& blocks) {
  if (blocks.size() != executors_.size())
    throw Error("bind_blocks: " + std::to_string(blocks.size()) + " blocks for " + std::to_string(executors_.size()) + " devices");
  for (std::size_t r = 0; r < blocks.size(); ++r) executors_[r]->bind(local(leaf), blocks[r]);
}

void SpmdProgram::run() {
  runtime_.workers().run([this](int rank) { executors_[static_cast<std::size_t>(rank)]->run(); });
}

Tensor SpmdProgram::output(ValueId global) const {
  auto it = std::find(outputs_.begin(), outputs_.end(), global);
  if (it == outputs_.end()) throw GraphError("spmd program: value %" + std::to_string(global) + " is not an output");
  return executors_[0]->output(partition_.outputs[static_cast<std::size_t>(it - outputs_.begin())]);
}

void SpmdProgram::set_update_step(std::int64_t step, float learning_rate) {
  for (auto& e : executors_) e->set_update_step(step, learning_rate);
}

void SpmdProgram::enable_profiling(std::map<std::string, Executor::OpTime>* sink) { executors_[0]->enable_profiling(sink); }

}  // namespace tessera
