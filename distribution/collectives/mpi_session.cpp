#include "distribution/collectives/mpi_session.hpp"

#include <cstdlib>
#include <limits>

#include "engine/error.hpp"

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

void MpiSession::sum_over_processes(std::span<double> values) {
  if (!placement().multi_process()) return;
  in_pieces(values.size(), [&](std::size_t start, int n) {
    if (MPI_Allreduce(MPI_IN_PLACE, values.data() + start, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS)
      throw CollectiveError("summing host values over processes failed (MPI_Allreduce)");
  });
}

void MpiSession::merge_over_processes(std::span<std::byte> bytes) {
  if (!placement().multi_process()) return;
  in_pieces(bytes.size(), [&](std::size_t start, int n) {
    if (MPI_Allreduce(MPI_IN_PLACE, bytes.data() + start, n, MPI_BYTE, MPI_BOR, MPI_COMM_WORLD) != MPI_SUCCESS)
      throw CollectiveError("merging tensors over processes failed (MPI_Allreduce)");
  });
}

void MpiSession::barrier() {
  if (placement().multi_process() && MPI_Barrier(MPI_COMM_WORLD) != MPI_SUCCESS)
    throw CollectiveError("the barrier over processes failed (MPI_Barrier)");
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
void MpiSession::sum_over_processes(std::span<double>) {}
void MpiSession::merge_over_processes(std::span<std::byte>) {}
void MpiSession::barrier() {}

#endif

}  // namespace tessera
