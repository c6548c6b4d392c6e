#include "distribution/spmd_program.hpp"

#include <algorithm>
#include <cstring>
#include <set>

#include "distribution/collectives/shm_communicator.hpp"
#include "tessera_features.hpp"
#if TESSERA_HAVE_MPI
#include "distribution/collectives/mpi_communicator.hpp"
#endif
#include "backends/registry.hpp"
#include "distribution/shard_copy.hpp"
#include "engine/graph/staged_runner.hpp"
#if TESSERA_HAVE_CUDA
#include "distribution/collectives/cuda_peer_kernels.hpp"
#endif
#if TESSERA_HAVE_NCCL
#include "backends/cuda/cuda_backend.hpp"
#include "distribution/collectives/nccl_communicator.hpp"
#endif

namespace tessera {
namespace {

// Whether the mesh's devices are logical devices of one GPU (registry.hpp).
bool shares_one_gpu(const DeviceMesh& mesh) {
  const Device first = mesh.devices().front();
  return first.kind == DeviceKind::cuda && cuda_gpu_shares(first) > 1;
}

// One kind of device per mesh: CPU devices exchange through shared memory
// (MPI between processes), GPUs through NCCL, the logical devices of one GPU
// through its memory.
const Distribution& check_devices(const Distribution& distribution) {
  const auto& devices = distribution.mesh().devices();
  for (const Device& d : devices)
    if (d.kind != devices.front().kind)
      throw UnsupportedError("a mesh holds one kind of device; this one has " + devices.front().str() + " and " + d.str());
  if (shares_one_gpu(distribution.mesh())) {
    if (distribution.placement().multi_process())
      throw UnsupportedError("logical devices of one GPU (" + devices.front().str() + ", ...) run in one process; this "
                             "job has " + std::to_string(distribution.placement().processes) + " processes");
    return distribution;
  }
  if (devices.front().kind == DeviceKind::cuda && !TESSERA_HAVE_NCCL)
    throw UnsupportedError("a mesh of GPUs (" + devices.front().str() + ", ...) exchanges through NCCL, and this build "
                           "has none (install NCCL beside the CUDA toolkit and rebuild)");
  return distribution;
}

std::unique_ptr<Communicator> make_communicator(const DeviceMesh& mesh, const ProcessPlacement& placement,
                                                const std::vector<int>& local_ranks) {
#if TESSERA_HAVE_CUDA
  if (shares_one_gpu(mesh))  // one process (check_devices): rank r is mesh device r
    return std::make_unique<ShmCommunicator>(static_cast<int>(mesh.size()), [&](int rank) {
      return std::make_unique<CudaPeerKernels>(mesh.devices()[static_cast<std::size_t>(rank)]);
    });
#endif
#if TESSERA_HAVE_NCCL
  if (mesh.devices().front().kind == DeviceKind::cuda) {
    std::vector<CUstream_st*> streams;  // each rank's collectives run on its backend's stream
    for (int rank : local_ranks)
      streams.push_back(static_cast<CudaBackend&>(backend_for(mesh.devices()[static_cast<std::size_t>(rank)])).stream());
    return std::make_unique<NcclCommunicator>(mesh, std::move(streams), placement);
  }
#else
  (void)local_ranks;
#endif
  if (!placement.multi_process()) return std::make_unique<ShmCommunicator>(static_cast<int>(mesh.size()));
#if TESSERA_HAVE_MPI
  return std::make_unique<MpiCommunicator>(mesh, placement);
#else
  throw UnsupportedError("a job of " + std::to_string(placement.processes) +
                         " processes needs the MPI communicator, and this build has none (rebuild with MPI)");
#endif
}

bool any_keeps_copies(const DeviceMesh& mesh, Residency residency) {
  const auto& devices = mesh.devices();
  return std::any_of(devices.begin(), devices.end(), [&](Device d) { return keeps_copies(residency, d); });
}

}  // namespace

SpmdRuntime::SpmdRuntime(const Distribution& distribution, ProcessGroup& processes, Residency residency)
    : distribution_(check_devices(distribution)),
      processes_(processes),
      keeps_copies_(any_keeps_copies(distribution.mesh(), residency)),
      local_ranks_(distribution.placement().local_ranks(distribution.mesh().size())),
      comm_(make_communicator(distribution.mesh(), distribution.placement(), local_ranks_)) {
  for (std::int64_t rank = 0; rank < mesh().size(); ++rank) contexts_.emplace_back(mesh(), *comm_, static_cast<int>(rank));
  workers_ = std::make_unique<DeviceWorkers>(local_ranks_, comm_.get());
}

SpmdRuntime::~SpmdRuntime() = default;

std::size_t SpmdRuntime::local_index(int rank) const {
  auto it = std::find(local_ranks_.begin(), local_ranks_.end(), rank);
  if (it == local_ranks_.end())
    throw Error("device " + std::to_string(rank) + " of the mesh belongs to another process (" +
                distribution_.placement().str() + " runs devices " + std::to_string(local_ranks_.front()) + ".." +
                std::to_string(local_ranks_.back()) + ")");
  return static_cast<std::size_t>(it - local_ranks_.begin());
}

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
  Entry entry{sharding, {}, {}};
  if (source_ && source_->index().tensors.contains(path)) {  // else the store's value is current
    read_blocks(path, entry);
    return entries_.emplace(path, std::move(entry)).first->second.blocks;
  }
  for (int rank : local_ranks_) {
    try {
      if (v->deferred()) {  // each device draws its own block; the whole is never made
        Tensor block = Tensor::empty(sharding.local_shape(v->shape(), mesh_), v->dtype(), host_device(rank));
        v->init(block, sharding.block_start(v->shape(), mesh_, rank));
        entry.host_blocks.push_back(block);
      } else {
        entry.host_blocks.push_back(extract_block(v->value, sharding, mesh_, rank, host_device(rank)));
      }
    } catch (const OutOfMemoryError& e) {
      throw OutOfMemoryError("variable '" + path + "' (its block " + sharding.local_shape(v->shape(), mesh_).str() +
                             " as " + sharding.str(mesh_) + "): " + e.what());
    }
  }
  upload(entry);
  return entries_.emplace(path, std::move(entry)).first->second.blocks;
}

Device ShardedVariables::host_device(int rank) const {
  return host_side(device_copies_, mesh_.devices()[static_cast<std::size_t>(rank)]);
}

void ShardedVariables::upload(Entry& entry) const {
  if (!device_copies_) {
    entry.blocks = entry.host_blocks;
    return;
  }
  const bool fresh = entry.blocks.empty();
  for (std::size_t i = 0; i < local_ranks_.size(); ++i) {
    const Device device = mesh_.devices()[static_cast<std::size_t>(local_ranks_[i])];
    const Tensor& host = entry.host_blocks[i];
    if (fresh) entry.blocks.push_back(Tensor::empty(host.shape(), host.dtype(), device));
    backend_for(device).copy(host, entry.blocks[i]);
  }
}

void ShardedVariables::download() {
  if (!device_copies_) return;
  for (auto& [path, entry] : entries_)
    for (std::size_t i = 0; i < local_ranks_.size(); ++i)
      backend_for(entry.blocks[i].device()).copy(entry.blocks[i], entry.host_blocks[i]);
  for (int rank : local_ranks_) backend_for(mesh_.devices()[static_cast<std::size_t>(rank)]).synchronize();  // the host reads next
}

void ShardedVariables::read_block(CheckpointReader& reader, NonFinite non_finite, const std::string& path,
                                  const Sharding& sharding, int rank, const Tensor& out) const {
  const Variable& v = *store_.find(path);
  const ShardSlice slice{sharding.block_start(v.shape(), mesh_, rank), sharding.local_shape(v.shape(), mesh_).dims()};
  reader.read_into(path, slice, out);  // checks the checksums
  check_finite(out, "'" + reader.dir().string() + "'", "block " + slice.str() + " of tensor '" + path + "'", non_finite);
}

void ShardedVariables::read_blocks(const std::string& path, Entry& entry) {
  const Variable& v = *store_.find(path);
  const Shape block = entry.sharding.local_shape(v.shape(), mesh_);
  const bool fresh = entry.host_blocks.empty();
  for (std::size_t i = 0; i < local_ranks_.size(); ++i) {
    if (fresh) entry.host_blocks.push_back(Tensor::empty(block, v.dtype(), host_device(local_ranks_[i])));
    read_block(*source_, source_non_finite_, path, entry.sharding, local_ranks_[i], entry.host_blocks[i]);
  }
  upload(entry);
}

void ShardedVariables::read_from(const std::filesystem::path& dir, NonFinite non_finite) {
  // A refused load changes nothing: every block this process holds is read
  // and checked first, one at a time, and only then read into the live
  // blocks (again, mostly from the page cache). Reading all of them aside
  // would need a second copy of this process's share of the model.
  CheckpointReader reader(dir, checkpoint_index(dir));  // one reader: each file's header is read once
  for (const auto& [path, entry] : entries_) {
    const Variable& v = *store_.find(path);
    const Tensor scratch = Tensor::empty(entry.sharding.local_shape(v.shape(), mesh_), v.dtype());
    for (int rank : local_ranks_) read_block(reader, non_finite, path, entry.sharding, rank, scratch);
  }
  source_.emplace(std::move(reader));
  source_non_finite_ = non_finite;
  for (auto& [path, entry] : entries_) read_blocks(path, entry);
}

void ShardedVariables::detach_source() {
  if (!source_) return;
  for (Variable& v : store_.variables())
    if (!entries_.contains(v.path) && source_->index().tensors.contains(v.path)) {  // no program holds it: whole
      Tensor values = source_->read(v.path, ShardSlice::whole(v.shape().dims()));
      check_finite(values, "'" + source_->dir().string() + "'", "tensor '" + v.path + "'", source_non_finite_);
      if (v.deferred()) v.value = values;  // nothing holds it: take the tensor read
      else std::memcpy(v.value.raw_data(), values.raw_data(), values.nbytes());
    }
  // The store and the blocks hold everything now; the checkpoint may be replaced.
  source_.reset();
}

void ShardedVariables::write_back(ProcessGroup& processes, std::chrono::milliseconds timeout) {
  detach_source();
  download();
  const bool merge = local_ranks_.size() != static_cast<std::size_t>(mesh_.size());
  for (const auto& [path, entry] : entries_) {
    Variable& v = *store_.find(path);
    // A deferred variable of a job of several processes stays as the devices'
    // blocks: making it whole is what deferring avoids (saves are sharded).
    if (merge && v.deferred()) continue;
    // One process holds every block, which together cover the whole: storage
    // for them suffices, no initializer is drawn.
    if (v.deferred()) v.value = Tensor::empty(v.shape(), v.dtype());
    const Tensor& value = v.value;
    // Each block is written by exactly one device, the first of its copies.
    // With several processes each fills in its own blocks over zeros, and
    // OR-ing the processes' bytes merges them exactly.
    if (merge) std::memset(value.raw_data(), 0, value.nbytes());
    for (std::size_t i = 0; i < local_ranks_.size(); ++i)
      if (entry.sharding.is_first_copy(mesh_, local_ranks_[i]))
        insert_block(entry.host_blocks[i], value, entry.sharding, mesh_, local_ranks_[i]);
    if (merge) processes.merge({static_cast<std::byte*>(value.raw_data()), value.nbytes()}, timeout);
  }
}

void ShardedVariables::reload() {
  source_.reset();  // the store is the source again
  for (auto& [path, entry] : entries_) {
    const Variable& v = *store_.find(path);
    if (v.deferred()) continue;  // nothing wrote a value: the blocks are current
    for (std::size_t i = 0; i < local_ranks_.size(); ++i)
      extract_block_into(v.value, entry.sharding, mesh_, local_ranks_[i], entry.host_blocks[i]);
    upload(entry);
  }
}

ShardedSave ShardedVariables::sharded_save(const ProcessPlacement& where) {
  detach_source();
  download();
  ShardedSave save;
  save.writer = where.process;
  save.writers = where.processes;
  const std::int64_t size = mesh_.size();
  for (Variable& v : store_.variables()) {
    const Shape& shape = v.shape();
    auto it = entries_.find(v.path);
    if (it == entries_.end()) {  // never bound: the store's value is current
      add_shard(save.index, v.path, v.dtype(), shape.dims(), 0, where.processes, ShardSlice::whole(shape.dims()));
      if (where.process == 0) {
        // Drawn for the file alone: the variable stays deferred in every process alike.
        Tensor whole = v.value;
        if (v.deferred()) {
          whole = Tensor::empty(shape, v.dtype());
          v.init(whole, std::vector<std::int64_t>(static_cast<std::size_t>(shape.rank()), 0));
        }
        save.blocks.push_back({v.path, ShardSlice::whole(shape.dims()), whole});
      }
      continue;
    }
    const Sharding& sharding = it->second.sharding;
    const Shape block = sharding.local_shape(shape, mesh_);
    for (int rank = 0; rank < size; ++rank) {
      if (!sharding.is_first_copy(mesh_, rank)) continue;
      const ShardSlice slice{sharding.block_start(shape, mesh_, rank), block.dims()};
      const int writer = where.owner(rank, size);
      add_shard(save.index, v.path, v.dtype(), shape.dims(), writer, where.processes, slice);
      if (writer == where.process)
        save.blocks.push_back({v.path, slice, it->second.host_blocks[static_cast<std::size_t>(rank - where.first_rank(size))]});
    }
  }
  return save;
}

SpmdProgram::SpmdProgram(const Graph& global, const std::vector<ValueId>& outputs, SpmdRuntime& runtime,
                         const std::map<ValueId, Sharding>& leaf_shardings, const std::map<ValueId, Sharding>& constraints,
                         int zero_axis)
    : global_(global), runtime_(runtime), partition_(tessera::partition(global, outputs, runtime.mesh(), leaf_shardings, constraints, zero_axis)), outputs_(outputs) {
  const DeviceMesh& mesh = runtime.mesh();
  for (int rank : runtime.local_ranks()) {
    const Device device = mesh.devices()[static_cast<std::size_t>(rank)];
    auto exec = std::make_unique<Executor>(partition_.local, partition_.outputs, device);
    exec->set_spmd(&runtime.context(rank));
    executors_.push_back(exec.get());
    if (runtime.keeps_copies())
      runners_.push_back(std::make_unique<StagedRunner>(std::move(exec), device));
    else
      runners_.push_back(std::move(exec));
  }
  const auto& schedule = executors_[0]->plan().schedule;
  std::set<NodeId> scheduled(schedule.begin(), schedule.end());
  for (const auto& c : partition_.collectives)
    if (scheduled.contains(partition_.local.value(c.local).producer)) live_collectives_.push_back(c);
}

std::int64_t SpmdProgram::workspace_bytes(int rank) const {
  return static_cast<std::int64_t>(executors_[runtime_.local_index(rank)]->plan().arena_bytes);
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
  for (int rank : runtime_.local_ranks()) {
    StepRunner& exec = *runners_[runtime_.local_index(rank)];  // stages onto devices that keep copies
    const Device host = host_side(runtime_.keeps_copies(), mesh.devices()[static_cast<std::size_t>(rank)]);
    if (inner_split || copy) {
      exec.bind(local_leaf, extract_block(whole, s, mesh, static_cast<int>(rank), host));
    } else if (s.rank() > 0 && s.dims[0] != Sharding::kNone) {
      std::int64_t rows = s.local_shape(whole.shape(), mesh)[0];
      exec.bind(local_leaf, whole.rows(s.block_start(whole.shape(), mesh, rank)[0], rows));
    } else {
      exec.bind(local_leaf, whole);
    }
  }
}

std::pair<std::int64_t, std::int64_t> SpmdProgram::local_rows(ValueId leaf) const {
  return sharding(leaf).rows_held(global_.shape(leaf), mesh(), runtime_.local_ranks());
}

void SpmdProgram::bind_rows(ValueId leaf, const Tensor& rows, std::int64_t first_row) {
  const ValueId local_leaf = local(leaf);
  const Sharding& s = sharding(leaf);
  const Shape& shape = global_.shape(leaf);
  const auto [begin, end] = local_rows(leaf);
  if (rows.rank() != shape.rank() || first_row > begin || first_row + rows.shape()[0] < end ||
      rows.numel() / std::max<std::int64_t>(rows.shape()[0], 1) != shape.numel() / std::max<std::int64_t>(shape[0], 1))
    throw ShapeError("bind_rows: '" + global_.value(leaf).name + "' of shape " + shape.str() + " needs rows " +
                     std::to_string(begin) + ".." + std::to_string(end) + " here, got " + rows.describe() +
                     " from row " + std::to_string(first_row));
  if (!s.splits_rows_only()) return bind(leaf, rows);
  const std::int64_t block = s.local_shape(shape, mesh())[0];
  for (int rank : runtime_.local_ranks())
    runners_[runtime_.local_index(rank)]->bind(local_leaf, rows.rows(s.block_start(shape, mesh(), rank)[0] - first_row, block));
}

void SpmdProgram::bind_blocks(ValueId leaf, const std::vector<Tensor>& blocks) {
  if (blocks.size() != executors_.size())
    throw Error("bind_blocks: " + std::to_string(blocks.size()) + " blocks for " + std::to_string(executors_.size()) + " devices");
  for (std::size_t r = 0; r < blocks.size(); ++r) executors_[r]->bind(local(leaf), blocks[r]);
}

void SpmdProgram::run() {
  runtime_.workers().run([this](int rank) { runners_[runtime_.local_index(rank)]->run(); });
}

Tensor SpmdProgram::output(ValueId global) const {
  auto it = std::find(outputs_.begin(), outputs_.end(), global);
  if (it == outputs_.end()) throw GraphError("spmd program: value %" + std::to_string(global) + " is not an output");
  return runners_[0]->output(partition_.outputs[static_cast<std::size_t>(it - outputs_.begin())]);
}

void SpmdProgram::set_update_step(std::int64_t step, float learning_rate) {
  for (auto& e : executors_) e->set_update_step(step, learning_rate);
}

void SpmdProgram::enable_profiling(std::map<std::string, OpTime>* sink) { executors_[0]->enable_profiling(sink); }

}  // namespace tessera
