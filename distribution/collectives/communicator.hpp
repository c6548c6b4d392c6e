// Communicator: the collectives that the ranks of one mesh exchange tensors with.
//
// Every call is collective over a CommGroup (the ranks that differ only along
// one or more mesh axes, in mesh order) and is made by each member with its
// own global rank; a call returns once this rank's part is done. Tensors are
// host tensors of the caller's device, row-major; `dim` names the tensor
// dimension that is split or joined, so a gather along dim 1 of [B, n*s] needs
// no transposes: member i's block is out[:, i*s:(i+1)*s].
//
// A member that does not arrive within timeout() is an error (CollectiveError)
// naming the collective, the group's axes and the missing ranks; abort() makes
// every pending and later call throw at once (one failing worker must not leave
// its peers waiting).
//
// Implementations: ShmCommunicator (threads of one process, shm_communicator.hpp),
// MpiCommunicator (the devices of several processes, mpi_communicator.hpp) and
// NcclCommunicator (GPUs, nccl_communicator.hpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "backends/op_kinds.hpp"
#include "engine/core/error.hpp"
#include "engine/core/tensor.hpp"

namespace tessera {

// The participants of one collective: global ranks in group order, and the
// mesh axes they span ("model", or "batch,model"), for messages and accounting.
// "0,1,2,3": ranks (or processes) for messages.
std::string join_ranks(const std::vector<int>& ranks);

struct CommGroup {
  std::vector<int> ranks;
  std::string axes;
  int size() const { return static_cast<int>(ranks.size()); }
  // Position of global rank `rank` in the group; throws Error if not a member.
  int index_of(int rank) const;
  bool operator==(const CommGroup&) const = default;
};

enum class CollectiveKind { all_reduce, all_gather, reduce_scatter, broadcast, all_to_all, barrier };
inline constexpr int kCollectiveKindCount = 6;
const char* name(CollectiveKind kind);

// Bytes and time of the collectives one rank took part in. `bytes` is what the
// rank sent over the links (NCCL's bus bytes): all_reduce 2(n-1)/n of the
// buffer, all_gather (n-1)/n of the output, reduce_scatter (n-1)/n of the
// input, all_to_all (n-1)/n of the input, broadcast the buffer (root only).
// `inter_process_bytes` is the part of them that crossed between processes
// (MpiCommunicator; always 0 in one process).
struct CollectiveStats {
  std::int64_t calls = 0;
  std::int64_t bytes = 0;
  double seconds = 0;
  std::int64_t inter_process_bytes = 0;
};

// The bus bytes above for one member of an n-member collective whose input
// and output hold `in_bytes` and `out_bytes`; `root`: it is broadcast's root.
std::int64_t bus_bytes(CollectiveKind kind, std::int64_t in_bytes, std::int64_t out_bytes, int n, bool root);

// Per rank: (kind, group axes) -> stats. Thread-safe.
class CollectiveAccounting {
 public:
  explicit CollectiveAccounting(int ranks = 0);
  void record(int rank, CollectiveKind kind, const std::string& axes, std::int64_t bytes, double seconds,
              std::int64_t inter_process_bytes = 0);
  using Key = std::pair<CollectiveKind, std::string>;
  std::map<Key, CollectiveStats> of_rank(int rank) const;
  // Summed over ranks.
  std::map<Key, CollectiveStats> total() const;
  void reset();

 private:
  mutable std::mutex mutex_;
  std::vector<std::map<Key, CollectiveStats>> per_rank_;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int size() const = 0;  // ranks in the world

  // out = reduction of every member's `in` (same shape; in == out allowed: in place).
  virtual void all_reduce(const CommGroup& group, int rank, const Tensor& in, const Tensor& out,
                          ReduceOp op = ReduceOp::sum) = 0;
  // out (in's shape with dim `dim` n times larger) = members' `in` joined along `dim` in group order.
  virtual void all_gather(const CommGroup& group, int rank, const Tensor& in, const Tensor& out, int dim) = 0;
  // out (in's shape with dim `dim` n times smaller) = this member's block along `dim` of the sum of every `in`.
  virtual void reduce_scatter(const CommGroup& group, int rank, const Tensor& in, const Tensor& out, int dim,
                              ReduceOp op = ReduceOp::sum) = 0;
  // x of every member = x of member `root` (an index into the group).
  virtual void broadcast(const CommGroup& group, int rank, const Tensor& x, int root) = 0;
  // Member i splits `in` into n blocks along split_dim and sends block j to
  // member j; out joins the received blocks along concat_dim in group order.
  virtual void all_to_all(const CommGroup& group, int rank, const Tensor& in, const Tensor& out, int split_dim,
                          int concat_dim) = 0;
  virtual void barrier(const CommGroup& group, int rank) = 0;

  // Wakes every waiting member and makes every later call throw CollectiveError with `reason`.
  virtual void abort(const std::string& reason) = 0;

  // How long a member waits for the others (virtual: a communicator built of others passes it on).
  virtual void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  CollectiveAccounting& accounting() { return *recorder_; }
  const CollectiveAccounting& accounting() const { return *recorder_; }
  // Records into `outer` from now on: a communicator that runs inside another
  // (the shared-memory part of an MPI one) reports to the outer one's accounting.
  void report_to(CollectiveAccounting& outer) { recorder_ = &outer; }

 protected:
  explicit Communicator(int ranks) : accounting_(ranks) {}
  std::chrono::milliseconds timeout_{60000};
  CollectiveAccounting accounting_;
  CollectiveAccounting* recorder_ = &accounting_;
};

}  // namespace tessera
