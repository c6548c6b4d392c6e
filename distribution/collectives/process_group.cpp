#include "distribution/collectives/process_group.hpp"

#include "distribution/collectives/mpi_session.hpp"

namespace tessera {
namespace {

// The job as MPI sees it (MpiSession is process 0 of 1 without a session).
class JobProcesses final : public ProcessGroup {
 public:
  ProcessPlacement placement() const override { return MpiSession::placement(); }
  void sum(std::span<double> values, std::chrono::milliseconds timeout) override {
    MpiSession::sum_over_processes(values, timeout);
  }
  void merge(std::span<std::byte> bytes, std::chrono::milliseconds timeout) override {
    MpiSession::merge_over_processes(bytes, timeout);
  }
  void barrier(std::chrono::milliseconds timeout) override { MpiSession::barrier(timeout); }
  void broadcast_from_first(std::span<std::byte> bytes, std::chrono::milliseconds timeout) override {
    MpiSession::broadcast_from_first(bytes, timeout);
  }
};

}  // namespace

ProcessGroup& job_processes() {
  static JobProcesses job;  // a registry-like singleton: the one job this process belongs to
  return job;
}

}  // namespace tessera
