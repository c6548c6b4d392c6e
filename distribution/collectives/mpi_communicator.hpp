// MpiCommunicator: the collectives of a mesh whose devices belong to several
// processes (mpirun -np N), behind the Communicator interface.
//
// Hierarchical: inside a process the members of a group meet through shared
// memory, and one member per process (the leader: its first member of the
// group) exchanges with the other processes over MPI.
//   all_reduce      reduce in the process, MPI_Allreduce among leaders, broadcast in
//                   the process; up to 1 MiB through slots of a staging area instead
//                   (the members meet twice, not four times)
//   all_gather      members write their blocks into a staging buffer of the process,
//                   MPI_Allgatherv among leaders, members unpack it along `dim`
//   reduce_scatter  reduce in the process, MPI_Reduce_scatter among leaders,
//                   each member takes its block
//   broadcast       MPI_Bcast from the root's process, broadcast in the process
//   all_to_all      an all_gather of every member's blocks, each keeping its own
// A group whose members all live in this process runs on shared memory alone.
// When a device of this process fails (abort()), the job ends at once with
// its error: peers blocked in MPI calls cannot be woken any other way.
//
// Every group that spans processes gets its own MPI communicator, made when
// the communicator is built (a collective call of every process), so that the
// leaders of different groups can talk at once (MPI_THREAD_MULTIPLE).
// The MPI calls are the blocking ones, whose algorithms are tuned (the
// non-blocking ones ran at half their speed here); a watchdog thread ends the
// job when one outlasts timeout(), after printing which collective waited for
// which processes, so a process that never joins is an error, not a hang.
//
// Requires a process's members of every group to be consecutive in group
// order, which ProcessPlacement's consecutive ranks give on any mesh.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distribution/collectives/communicator.hpp"
#include "distribution/collectives/shm_communicator.hpp"
#include "distribution/device_mesh.hpp"
#include "distribution/process_placement.hpp"

namespace tessera {

class MpiCommunicator final : public Communicator {
 public:
  // Collective over every process of MPI_COMM_WORLD (an MpiSession must be active).
  MpiCommunicator(const DeviceMesh& mesh, ProcessPlacement placement);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int size() const override { return whole_.size(); }
  // Also the in-process parts': groups inside this process wait `timeout`;
  // members waiting in shared memory for their process's leader wait longer,
  // so that the leader's watchdog, which names the late process, speaks first.
  void set_timeout(std::chrono::milliseconds timeout) override;

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
  struct Group;
  // Ends the job when a blocking MPI call outlasts its deadline. Each device
  // thread of this process makes one call at a time: a slot per device, set
  // and cleared around the call without allocating.
  class Watchdog {
   public:
    // `describe` says what the call in a slot waited for, when it expires.
    Watchdog(int process, int devices, std::function<std::string(CollectiveKind, const CommGroup&, const Group&)> describe);
    ~Watchdog();
    class Watch {  // a slot under watch, for one call's scope
     public:
      Watch(Watchdog* dog, std::size_t slot) : dog_(dog), slot_(slot) {}
      ~Watch();
      Watch(const Watch&) = delete;
      Watch& operator=(const Watch&) = delete;

     private:
      Watchdog* dog_;
      std::size_t slot_;
    };
    Watch watch(std::size_t slot, std::chrono::steady_clock::time_point deadline, CollectiveKind kind,
                const CommGroup& group, const Group& g);

   private:
    struct Slot {
      bool busy = false;
      std::chrono::steady_clock::time_point deadline;
      CollectiveKind kind = CollectiveKind::barrier;
      const CommGroup* group = nullptr;
      const Group* g = nullptr;
    };
    std::function<std::string(CollectiveKind, const CommGroup&, const Group&)> describe_;
    std::mutex mutex_;
    std::condition_variable_any changed_;
    std::vector<Slot> slots_;  // by the device's place among this process's ranks
    std::jthread thread_;      // last: stopped before the state above goes
  };
  struct MpiOps;
  using TimePoint = std::chrono::steady_clock::time_point;
  Group& group_of(const CommGroup& group, int rank);
  // The staging buffer a group's members in this process share, viewed as `shape` x `dtype`.
  Tensor staging(Group& g, const Shape& shape, DType dtype);
  // A buffer of this rank's own for the group, viewed as `shape` x `dtype`.
  Tensor scratch(Group& g, int rank, const Shape& shape, DType dtype);
  void local_barrier(Group& g, int rank);
  // Every member's block, packed in group order in the staging buffer.
  Tensor gather_packed(Group& g, int rank, const std::byte* block, std::size_t block_bytes, const CommGroup& group,
                       TimePoint start, std::int64_t& inter_process_bytes);
  // Runs one blocking MPI call under the watchdog (deadline: start + timeout()).
  template <typename Call>
  void blocking(CollectiveKind kind, const CommGroup& group, const Group& g, int rank, TimePoint start, Call call);
  std::string timeout_message(CollectiveKind kind, const CommGroup& group, const Group& g) const;
  void record(int rank, CollectiveKind kind, const CommGroup& group, std::int64_t in_bytes, std::int64_t out_bytes,
              bool root, std::int64_t inter_process_bytes, TimePoint start);

  ProcessPlacement placement_;
  ShmCommunicator whole_;  // groups whose members all live in this process
  ShmCommunicator shm_;    // the in-process steps of groups that span processes (not accounted again)
  std::unique_ptr<MpiOps> ops_;
  Watchdog watchdog_;
  std::map<std::vector<int>, std::unique_ptr<Group>> groups_;  // by the group's ranks; made in the constructor
  std::atomic<bool> aborted_{false};
  std::mutex abort_mutex_;
  std::string abort_reason_;
};

}  // namespace tessera
