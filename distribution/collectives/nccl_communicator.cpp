#include "distribution/collectives/nccl_communicator.hpp"

#include <chrono>
#include <cstring>
#include <thread>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "backends/cuda/cuda_check.hpp"
#include "backends/registry.hpp"
#include "distribution/collectives/group_plan.hpp"
#include "distribution/collectives/mpi_session.hpp"
#include "distribution/sharding.hpp"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

void nccl_check(ncclResult_t status, const char* call) {
  if (status != ncclSuccess && status != ncclInProgress)
    throw CollectiveError(std::string("NCCL call ") + call + " failed: " + ncclGetErrorString(status));
}
#define TESSERA_NCCL_CHECK(call) nccl_check((call), #call)

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return ncclFloat32;
    case DType::bf16: return ncclBfloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
  }
  throw DTypeError("NCCL: no type for " + std::string(dtype_name(dtype)));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::mean: return ncclAvg;
    case ReduceOp::max: return ncclMax;
  }
  return ncclSum;
}

// The elements of `t` before dimension `dim`: blocks along `dim` are
// contiguous when this is 1.
std::int64_t outer(const Tensor& t, int dim) {
  std::int64_t n = 1;
  for (int d = 0; d < t.shape().normalize_axis(dim); ++d) n *= t.shape()[d];
  return n;
}

std::int64_t share(std::size_t bytes, int n) { return static_cast<std::int64_t>(bytes) * (n - 1) / n; }

}  // namespace

std::vector<std::byte> nccl_job_unique_id(std::chrono::milliseconds timeout) {
  ncclUniqueId id{};
  if (MpiSession::placement().process == 0) TESSERA_NCCL_CHECK(ncclGetUniqueId(&id));
  std::vector<std::byte> bytes(sizeof id);
  std::memcpy(bytes.data(), &id, sizeof id);
  MpiSession::broadcast_from_first(bytes, timeout);
  return bytes;
}

NcclCommunicator::NcclCommunicator(const DeviceMesh& mesh, std::vector<CUstream_st*> streams, ProcessPlacement placement)
    : Communicator(static_cast<int>(mesh.size())),
      devices_(static_cast<std::size_t>(mesh.size()), -1),
      streams_(static_cast<std::size_t>(mesh.size()), nullptr),
      world_(static_cast<std::size_t>(mesh.size()), nullptr),
      scratch_(static_cast<std::size_t>(mesh.size()), nullptr) {
  placement.check(mesh.size());
  const std::vector<int> local = placement.local_ranks(mesh.size());
  if (streams.size() != local.size())
    throw Error("NcclCommunicator: " + std::to_string(local.size()) + " streams needed (one per device of " +
                placement.str() + "), got " + std::to_string(streams.size()));
  for (std::size_t i = 0; i < local.size(); ++i) {
    const Device& d = mesh.devices()[static_cast<std::size_t>(local[i])];
    if (d.kind != DeviceKind::cuda) throw DeviceError("NcclCommunicator: " + d.str() + " is not a GPU");
    devices_[static_cast<std::size_t>(local[i])] = cuda_gpu_of(d);
    streams_[static_cast<std::size_t>(local[i])] = streams[i];
  }
  if (!placement.multi_process()) {
    TESSERA_NCCL_CHECK(ncclCommInitAll(world_.data(), size(), devices_.data()));
  } else {  // this process's ranks of one world communicator, joined by the id process 0 drew
    ncclUniqueId id;
    const std::vector<std::byte> bytes = nccl_job_unique_id(timeout());
    std::memcpy(&id, bytes.data(), sizeof id);
    TESSERA_NCCL_CHECK(ncclGroupStart());
    for (int r : local) {
      CudaDeviceGuard guard(devices_[static_cast<std::size_t>(r)]);
      TESSERA_NCCL_CHECK(ncclCommInitRank(&world_[static_cast<std::size_t>(r)], size(), id, r));
    }
    TESSERA_NCCL_CHECK(ncclGroupEnd());
  }
  // A communicator per rank for every set of mesh axes, split from the world
  // by the shared plan; every rank of the job splits together (one group call
  // per process).
  for (std::uint32_t mask = 1; mask < (1u << mesh.rank()); ++mask) {
    const auto places = group_places(mesh, mask);
    auto& comms = by_axes_[axes_label(mask, mesh)];
    comms.resize(devices_.size(), nullptr);
    TESSERA_NCCL_CHECK(ncclGroupStart());
    for (int r : local) {
      const auto i = static_cast<std::size_t>(r);
      CudaDeviceGuard guard(devices_[i]);
      TESSERA_NCCL_CHECK(ncclCommSplit(world_[i], places[i].color, places[i].key, &comms[i], nullptr));
    }
    TESSERA_NCCL_CHECK(ncclGroupEnd());
  }
  for (int r : local) {
    CudaDeviceGuard guard(devices_[static_cast<std::size_t>(r)]);
    TESSERA_CUDA_CHECK(cudaMalloc(&scratch_[static_cast<std::size_t>(r)], 4));
  }
}

NcclCommunicator::~NcclCommunicator() {
  for (auto& [axes, comms] : by_axes_)
    for (ncclComm* c : comms)
      if (c != nullptr) aborted_ ? ncclCommAbort(c) : ncclCommDestroy(c);
  for (ncclComm* c : world_)
    if (c != nullptr) aborted_ ? ncclCommAbort(c) : ncclCommDestroy(c);
  for (std::size_t r = 0; r < scratch_.size(); ++r) {
    if (scratch_[r] == nullptr) continue;
    CudaDeviceGuard guard(devices_[r]);
    cudaFree(scratch_[r]);
  }
}

ncclComm* NcclCommunicator::comm_for(const CommGroup& group, int rank) const {
  if (aborted_) throw CollectiveError("the communicator was aborted: " + abort_reason());
  auto it = by_axes_.find(group.axes);
  if (it == by_axes_.end()) throw CollectiveError("NCCL: no communicator for mesh axes '" + group.axes + "'");
  if (rank < 0 || static_cast<std::size_t>(rank) >= it->second.size() || it->second[static_cast<std::size_t>(rank)] == nullptr)
    throw CollectiveError("NCCL: rank " + std::to_string(rank) + " is not one of this process's devices");
  return it->second[static_cast<std::size_t>(rank)];
}

void NcclCommunicator::wait(const char* what, const CommGroup& group, int rank) {
  const auto deadline = Clock::now() + timeout();
  cudaStream_t stream = streams_[static_cast<std::size_t>(rank)];
  for (;;) {
    cudaError_t state = cudaStreamQuery(stream);
    if (state == cudaSuccess) return;
    if (state != cudaErrorNotReady) TESSERA_CUDA_CHECK(state);
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm_for(group, rank), &async);
    if (async != ncclSuccess && async != ncclInProgress)
      throw CollectiveError(std::string(what) + " over mesh axes '" + group.axes + "' failed on rank " +
                            std::to_string(rank) + ": " + ncclGetErrorString(async));
    if (Clock::now() > deadline || aborted_) {
      abort(std::string(what) + " over mesh axes '" + group.axes + "' did not complete on rank " + std::to_string(rank) +
            " within " + std::to_string(timeout().count()) + " ms (a peer did not arrive)");
      throw CollectiveError(abort_reason());
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void NcclCommunicator::abort(const std::string& reason) {
  std::lock_guard lock(abort_mutex_);  // the reason is in place before any thread sees the flag
  if (aborted_) return;
  abort_reason_ = reason;
  aborted_ = true;
}

std::string NcclCommunicator::abort_reason() const {
  std::lock_guard lock(abort_mutex_);
  return abort_reason_;
}

void NcclCommunicator::all_reduce(const CommGroup& group, int rank, const Tensor& in, const Tensor& out, ReduceOp op) {
  const auto start = Clock::now();
  CudaDeviceGuard guard(devices_[static_cast<std::size_t>(rank)]);
  TESSERA_NCCL_CHECK(ncclAllReduce(in.raw_data(), out.raw_data(), static_cast<std::size_t>(in.numel()), nccl_type(in.dtype()),
                                   nccl_op(op), comm_for(group, rank), streams_[static_cast<std::size_t>(rank)]));
  wait("all_reduce", group, rank);
  accounting().record(rank, CollectiveKind::all_reduce, group.axes, 2 * share(in.nbytes(), group.size()),
                     std::chrono::duration<double>(Clock::now() - start).count());
}

void NcclCommunicator::all_gather(const CommGroup& group, int rank, const Tensor& in, const Tensor& out, int dim) {
  if (outer(out, dim) != 1)
    throw UnsupportedError("NCCL all_gather along dimension " + std::to_string(dim) + " of " + out.describe() +
                           ": only contiguous blocks (every earlier dimension of size 1) for now");
  const auto start = Clock::now();
  CudaDeviceGuard guard(devices_[static_cast<std::size_t>(rank)]);
  TESSERA_NCCL_CHECK(ncclAllGather(in.raw_data(), out.raw_data(), static_cast<std::size_t>(in.numel()), nccl_type(in.dtype()),
                                   comm_for(group, rank), streams_[static_cast<std::size_t>(rank)]));
  wait("all_gather", group, rank);
  accounting().record(rank, CollectiveKind::all_gather, group.axes, share(out.nbytes(), group.size()),
                     std::chrono::duration<double>(Clock::now() - start).count());
}

void NcclCommunicator::reduce_scatter(const CommGroup& group, int rank, const Tensor& in, const Tensor& out, int dim,
                                      ReduceOp op) {
  if (outer(in, dim) != 1)
    throw UnsupportedError("NCCL reduce_scatter along dimension " + std::to_string(dim) + " of " + in.describe() +
                           ": only contiguous blocks (every earlier dimension of size 1) for now");
  const auto start = Clock::now();
  CudaDeviceGuard guard(devices_[static_cast<std::size_t>(rank)]);
  TESSERA_NCCL_CHECK(ncclReduceScatter(in.raw_data(), out.raw_data(), static_cast<std::size_t>(out.numel()),
                                       nccl_type(in.dtype()), nccl_op(op), comm_for(group, rank),
                                       streams_[static_cast<std::size_t>(rank)]));
  wait("reduce_scatter", group, rank);
  accounting().record(rank, CollectiveKind::reduce_scatter, group.axes, share(in.nbytes(), group.size()),
                     std::chrono::duration<double>(Clock::now() - start).count());
}

void NcclCommunicator::broadcast(const CommGroup& group, int rank, const Tensor& x, int root) {
  const auto start = Clock::now();
  CudaDeviceGuard guard(devices_[static_cast<std::size_t>(rank)]);
  TESSERA_NCCL_CHECK(ncclBroadcast(x.raw_data(), x.raw_data(), static_cast<std::size_t>(x.numel()), nccl_type(x.dtype()), root,
                                   comm_for(group, rank), streams_[static_cast<std::size_t>(rank)]));
  wait("broadcast", group, rank);
  accounting().record(rank, CollectiveKind::broadcast, group.axes,
                     group.index_of(rank) == root ? static_cast<std::int64_t>(x.nbytes()) : 0,
                     std::chrono::duration<double>(Clock::now() - start).count());
}

void NcclCommunicator::all_to_all(const CommGroup& group, int rank, const Tensor& in, const Tensor& out, int split_dim,
                                  int concat_dim) {
  if (in.shape().normalize_axis(split_dim) != 0 || out.shape().normalize_axis(concat_dim) != 0)
    throw UnsupportedError("NCCL all_to_all splits and joins dimension 0 for now (asked for " + std::to_string(split_dim) +
                           " and " + std::to_string(concat_dim) + ")");
  const auto start = Clock::now();
  CudaDeviceGuard guard(devices_[static_cast<std::size_t>(rank)]);
  const int n = group.size();
  const std::size_t block = static_cast<std::size_t>(in.numel() / n), bytes = block * dtype_size(in.dtype());
  ncclComm* comm = comm_for(group, rank);
  cudaStream_t stream = streams_[static_cast<std::size_t>(rank)];
  TESSERA_NCCL_CHECK(ncclGroupStart());
  for (int peer = 0; peer < n; ++peer) {
    TESSERA_NCCL_CHECK(ncclSend(static_cast<const char*>(in.raw_data()) + peer * bytes, block, nccl_type(in.dtype()), peer, comm, stream));
    TESSERA_NCCL_CHECK(ncclRecv(static_cast<char*>(out.raw_data()) + peer * bytes, block, nccl_type(in.dtype()), peer, comm, stream));
  }
  TESSERA_NCCL_CHECK(ncclGroupEnd());
  wait("all_to_all", group, rank);
  accounting().record(rank, CollectiveKind::all_to_all, group.axes, share(in.nbytes(), n),
                     std::chrono::duration<double>(Clock::now() - start).count());
}

void NcclCommunicator::barrier(const CommGroup& group, int rank) {
  CudaDeviceGuard guard(devices_[static_cast<std::size_t>(rank)]);
  void* p = scratch_[static_cast<std::size_t>(rank)];
  TESSERA_NCCL_CHECK(ncclAllReduce(p, p, 1, ncclInt32, ncclSum, comm_for(group, rank), streams_[static_cast<std::size_t>(rank)]));
  wait("barrier", group, rank);
  accounting().record(rank, CollectiveKind::barrier, group.axes, 0, 0);
}

}  // namespace tessera
