// ShmCommunicator: the collectives of devices that share one memory, whose
// ranks are threads of one process: the logical CPU devices (host memory,
// ShmKernels) or the logical devices of one GPU (its memory, CudaPeerKernels).
//
// Members meet at a rendezvous per group (keyed by the group's ranks): each
// publishes its tensors, waits for the others, checks that all calls agree,
// then reads and writes its peers' buffers directly, and a closing barrier
// keeps every buffer alive until all peers are done with it. Work is split so
// that no two members touch the same bytes:
//   all_reduce      member i reduces slice i of every input and writes it into
//                   every output: one pass, each byte read once and written
//                   once (reduce-then-copy phases would read every slice twice)
//   reduce_scatter  member i reduces block i of every input into its output
//   all_gather      member i writes its input into block i of every output
//   broadcast       every other member copies the root's buffer into its own
//   all_to_all      member i copies block i of every input into its output
// Nothing runs on other threads: the callers are the threads. The memory
// kernels are a SharedMemoryKernels per rank (shared_memory_kernels.hpp).
//
// In place: all_reduce with in == out; all_gather with `in` being this
// member's block of `out` along dim 0; reduce_scatter with `out` being this
// member's block of `in` along dim 0. Any other overlap of in and out is an
// error.
//
// A member that does not arrive within timeout() aborts the communicator (the
// group's rendezvous cannot be resumed, and the missing rank's other groups
// would wait for it too): the waiting members throw the timeout error, every
// later call the abort error.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "distribution/collectives/communicator.hpp"
#include "distribution/collectives/shared_memory_kernels.hpp"

namespace tessera {

namespace shm_detail {
struct Call;        // one member's arguments, published at the rendezvous
struct Rendezvous;  // per group
struct Workspace;   // per rank: chunk accumulators and pointer tables
}  // namespace shm_detail

class ShmCommunicator final : public Communicator {
 public:
  // The kernels of each rank; empty: the host's (ShmKernels), for logical CPU devices.
  using KernelsFor = std::function<std::unique_ptr<SharedMemoryKernels>(int rank)>;
  explicit ShmCommunicator(int ranks, const KernelsFor& kernels = {});
  ~ShmCommunicator() override;
  ShmCommunicator(const ShmCommunicator&) = delete;
  ShmCommunicator& operator=(const ShmCommunicator&) = delete;

  int size() const override { return ranks_; }

  void all_reduce(const CommGroup& group, int rank, const Tensor& in, const Tensor& out,
                  ReduceOp op = ReduceOp::sum) override;
  void all_gather(const CommGroup& group, int rank, const Tensor& in, const Tensor& out, int dim) override;
  void reduce_scatter(const CommGroup& group, int rank, const Tensor& in, const Tensor& out, int dim,
                      ReduceOp op = ReduceOp::sum) override;
  void broadcast(const CommGroup& group, int rank, const Tensor& x, int root) override;
  void all_to_all(const CommGroup& group, int rank, const Tensor& in, const Tensor& out, int split_dim,
                  int concat_dim) override;
  void barrier(const CommGroup& group, int rank) override;

  void abort(const std::string& reason) override;

 private:
  void run(const CommGroup& group, int rank, const shm_detail::Call& call);
  shm_detail::Rendezvous& rendezvous_for(const CommGroup& group);
  // Blocks until every member has arrived; throws on timeout or abort.
  void arrive(shm_detail::Rendezvous& rv, const CommGroup& group, int member, CollectiveKind kind,
              std::chrono::steady_clock::time_point start);
  // A barrier among members that are all inside the collective already: no
  // timeout and no abort, since leaving early would free or overwrite a
  // buffer that a peer may still be reading.
  void phase_barrier(shm_detail::Rendezvous& rv) const;
  [[noreturn]] void throw_aborted(CollectiveKind kind, const CommGroup& group) const;

  int ranks_;
  std::chrono::nanoseconds spin_;  // how long a waiter spins before it blocks; 0 when threads outnumber cores
  std::size_t stream_threshold_;    // collectives writing more bytes use non-temporal stores
  std::vector<std::unique_ptr<shm_detail::Workspace>> workspace_;  // by global rank

  mutable std::mutex mutex_;  // guards rendezvous_ and abort_reason_
  std::map<std::vector<int>, std::unique_ptr<shm_detail::Rendezvous>> rendezvous_;
  std::atomic<bool> aborted_{false};
  std::string abort_reason_;  // written once, before aborted_ is set
};

}  // namespace tessera
