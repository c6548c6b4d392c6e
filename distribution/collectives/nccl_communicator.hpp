// NcclCommunicator: the collectives of one process's GPUs over NCCL, behind
// the Communicator interface the shared-memory one implements.
//
// One NCCL communicator per rank and mesh-axis set, split from a world
// communicator (ncclCommInitAll) with group_plan.hpp's color and key, so the
// groups are exactly the shared-memory contexts' groups. Each call enqueues on
// the rank's stream and then waits for it (polling), so that a peer that
// never arrives becomes a CollectiveError after timeout() (the communicators
// are aborted) instead of a hang; overlapping the wait with the backward
// pass is left for the GPU executor.
//
// all_gather and reduce_scatter need contiguous blocks (every dimension
// before `dim` of size 1); all_to_all needs split_dim == concat_dim == 0.
// Other cases are an UnsupportedError until the GPU executor transposes
// around them.
//
// A job of several processes (a ProcessPlacement) gives each process the
// communicators of its own ranks: process 0 draws the NCCL unique id, MPI
// carries it to the others (nccl_job_unique_id), and each process initialises
// its ranks with ncclCommInitRank before the same splits.
//
// Compiled only with CUDA and NCCL (TESSERA_HAVE_NCCL); tested by the GPU suite, except
// nccl_job_unique_id, which needs no GPU and runs in the MPI suite.
#pragma once

#include <atomic>
#include <mutex>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "distribution/collectives/communicator.hpp"
#include "distribution/device_mesh.hpp"
#include "distribution/process_placement.hpp"

struct ncclComm;         // ncclComm_t is ncclComm*
struct CUstream_st;      // cudaStream_t is CUstream_st*

namespace tessera {

class NcclCommunicator final : public Communicator {
 public:
  // `mesh` of cuda devices; `streams[i]` is the stream (its CudaBackend's) of
  // this process's i-th rank (placement.local_ranks(): every rank in one process).
  NcclCommunicator(const DeviceMesh& mesh, std::vector<CUstream_st*> streams, ProcessPlacement placement = {});
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int size() const override { return static_cast<int>(devices_.size()); }
  void all_reduce(const CommGroup& group, int rank, const Tensor& in, const Tensor& out, ReduceOp op) override;
  void all_gather(const CommGroup& group, int rank, const Tensor& in, const Tensor& out, int dim) override;
  void reduce_scatter(const CommGroup& group, int rank, const Tensor& in, const Tensor& out, int dim,
                      ReduceOp op) override;
  void broadcast(const CommGroup& group, int rank, const Tensor& x, int root) override;
  void all_to_all(const CommGroup& group, int rank, const Tensor& in, const Tensor& out, int split_dim,
                  int concat_dim) override;
  void barrier(const CommGroup& group, int rank) override;
  void abort(const std::string& reason) override;

 private:
  ncclComm* comm_for(const CommGroup& group, int rank) const;
  // Waits for rank's stream; after timeout() marks the communicator aborted
  // (ncclCommAbort runs in the destructor) and throws. Not yet: communicators
  // are blocking, so a peer missing at connection set-up can block inside the
  // NCCL call itself, before the deadline is looked at; non-blocking ones
  // (ncclConfig_t.blocking = 0) polled under the deadline would not.
  void wait(const char* what, const CommGroup& group, int rank);
  std::string abort_reason() const;

  // Per mesh rank; only this process's ranks have a device (else -1), a
  // stream, communicators and scratch (else null).
  std::vector<int> devices_;                 // CUDA device index
  std::vector<CUstream_st*> streams_;
  std::vector<ncclComm*> world_;
  std::map<std::string, std::vector<ncclComm*>> by_axes_;  // group label -> per-rank communicator
  std::vector<void*> scratch_;               // 4 device bytes for barrier()
  std::atomic<bool> aborted_{false};
  mutable std::mutex abort_mutex_;  // abort_reason_ is written once, read by every rank's thread
  std::string abort_reason_;
};

// The NCCL unique id that every process of the job passes to
// ncclCommInitRank: drawn by process 0 and broadcast over MPI (drawn here in
// a process of one). Waits up to `timeout` for the other processes.
std::vector<std::byte> nccl_job_unique_id(std::chrono::milliseconds timeout);

}  // namespace tessera
