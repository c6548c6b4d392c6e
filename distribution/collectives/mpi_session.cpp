#include "distribution/collectives/mpi_session.hpp"

#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <thread>

#include "distribution/collectives/communicator.hpp"
#include "engine/core/error.hpp"

#include "tessera_features.hpp"
#if TESSERA_HAVE_MPI
#include <mpi.h>
#endif

namespace tessera {

bool MpiSession::launched_by_mpirun() {
  // OpenMPI's launcher sets these in every process it starts (PMIx and the
  // older ORTE names; MPICH's Hydra sets PMI_RANK).
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(var) != nullptr) return true;
  return false;
}

#if TESSERA_HAVE_MPI

namespace {
bool active() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

// MPI counts are ints: large buffers go in pieces.
template <typename F>
void in_pieces(std::size_t count, F&& f) {
  constexpr std::size_t kPiece = std::numeric_limits<int>::max() / 2;
  for (std::size_t start = 0; start < count; start += kPiece) f(start, static_cast<int>(std::min(kPiece, count - start)));
}
}  // namespace

bool MpiSession::available() { return true; }

std::string MpiSession::not_joined(int process, std::chrono::milliseconds waited, const std::vector<int>& others) {
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.3f", static_cast<double>(waited.count()) / 1000.0);
  return "process " + std::to_string(process) + " waited " + seconds + " s for processes " + join_ranks(others) +
         ", which did not join (one stopped or is stuck)";
}

MpiSession::MpiSession() {
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    MPI_Finalize();
    throw UnsupportedError(
        "the MPI library does not provide MPI_THREAD_MULTIPLE, which the device threads of a process need "
        "(each calls collectives at the same time)");
  }
  // Errors come back as codes (and become exceptions) instead of ending the job silently.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

MpiSession::~MpiSession() {
  if (active()) MPI_Finalize();
}

ProcessPlacement MpiSession::placement() {
  if (!active()) return {};
  ProcessPlacement p;
  MPI_Comm_rank(MPI_COMM_WORLD, &p.process);
  MPI_Comm_size(MPI_COMM_WORLD, &p.processes);
  return p;
}

void MpiSession::abort_job(int code) {
  if (active()) MPI_Abort(MPI_COMM_WORLD, code);
}

namespace {
// Polls `request` until it completes (true) or `deadline` passes (false),
// spinning briefly, then sleeping between polls so that device threads and
// oversubscribed processes get the cores.
bool poll(MPI_Request& request, std::chrono::steady_clock::time_point deadline) {
  for (int polls = 0;; ++polls) {
    int done = 0;
    if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) throw CollectiveError("MPI_Test reported an error");
    if (done) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    if (polls < 2000)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// Runs start(&request) and waits for it, or throws naming `what` after `timeout`.
template <typename Start>
void exchange(const char* what, std::chrono::milliseconds timeout, Start start) {
  MPI_Request request;
  if (start(&request) != MPI_SUCCESS) throw CollectiveError(std::string(what) + " over processes failed");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  if (poll(request, deadline)) return;
  // The request cannot be cancelled, and a late peer would write into a
  // buffer the caller frees: say what waited for whom, and end the job.
  const ProcessPlacement where = MpiSession::placement();
  std::vector<int> others;
  for (int p = 0; p < where.processes; ++p)
    if (p != where.process) others.push_back(p);
  std::fprintf(stderr, "tessera: rank %d: collective error: %s: %s\n", where.process, what,
               MpiSession::not_joined(where.process, timeout, others).c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
}
}  // namespace

void MpiSession::sum_over_processes(std::span<double> values, std::chrono::milliseconds timeout) {
  if (!placement().multi_process()) return;
  in_pieces(values.size(), [&](std::size_t start, int n) {
    exchange("summing metrics over processes", timeout, [&](MPI_Request* r) {
      return MPI_Iallreduce(MPI_IN_PLACE, values.data() + start, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, r);
    });
  });
}

void MpiSession::merge_over_processes(std::span<std::byte> bytes, std::chrono::milliseconds timeout) {
  if (!placement().multi_process()) return;
  in_pieces(bytes.size(), [&](std::size_t start, int n) {
    exchange("merging variables over processes", timeout, [&](MPI_Request* r) {
      return MPI_Iallreduce(MPI_IN_PLACE, bytes.data() + start, n, MPI_BYTE, MPI_BOR, MPI_COMM_WORLD, r);
    });
  });
}

void MpiSession::broadcast_from_first(std::span<std::byte> bytes, std::chrono::milliseconds timeout) {
  if (!placement().multi_process()) return;
  in_pieces(bytes.size(), [&](std::size_t start, int n) {
    exchange("a decision of process 0", timeout, [&](MPI_Request* r) {
      return MPI_Ibcast(bytes.data() + start, n, MPI_BYTE, 0, MPI_COMM_WORLD, r);
    });
  });
}

void MpiSession::barrier(std::chrono::milliseconds timeout) {
  if (!placement().multi_process()) return;
  exchange("the barrier of all processes", timeout, [](MPI_Request* r) { return MPI_Ibarrier(MPI_COMM_WORLD, r); });
}

#else  // built without MPI

bool MpiSession::available() { return false; }

MpiSession::MpiSession() {
  throw UnsupportedError(
      "this process was started by mpirun, but Tessera was built without MPI (install libopenmpi-dev and rebuild: "
      "scripts/setup.sh && scripts/build.sh)");
}

MpiSession::~MpiSession() = default;
ProcessPlacement MpiSession::placement() { return {}; }
void MpiSession::abort_job(int) {}
void MpiSession::sum_over_processes(std::span<double>, std::chrono::milliseconds) {}
void MpiSession::merge_over_processes(std::span<std::byte>, std::chrono::milliseconds) {}
void MpiSession::barrier(std::chrono::milliseconds) {}
void MpiSession::broadcast_from_first(std::span<std::byte>, std::chrono::milliseconds) {}
std::string MpiSession::not_joined(int, std::chrono::milliseconds, const std::vector<int>&) { return {}; }

#endif

}  // namespace tessera
