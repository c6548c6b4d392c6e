// The doctest runner of the MPI suite: every process of `mpirun -np N
// tessera_mpi_tests` runs the same test cases over one mesh whose devices the
// processes share (ProcessPlacement), and the job fails when any process does.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "distribution/collectives/mpi_session.hpp"

int main(int argc, char** argv) {
  tessera::MpiSession mpi;
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  const tessera::ProcessPlacement where = tessera::MpiSession::placement();
  if (where.process != 0) context.setOption("minimal", true);  // one full report for the job
  int failed = context.run() != 0 ? 1 : 0;
  double any[1] = {static_cast<double>(failed)};
  tessera::MpiSession::sum_over_processes(any, std::chrono::minutes(1));
  if (where.process == 0 && any[0] > 0) std::printf("mpi suite: %d of %d processes failed\n", static_cast<int>(any[0]), where.processes);
  return any[0] > 0 ? 1 : 0;
}
