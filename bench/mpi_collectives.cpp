// bench_mpi_collectives: Tessera's MPI communicator against plain MPI_Allreduce
// of the same bytes, in the same run. Run it under mpirun:
//
//   mpirun -np 2 --oversubscribe build/bench/bench_mpi_collectives
//   mpirun -np 2 --oversubscribe build/bench/bench_mpi_collectives --sizes 1M,64M --iters 20
//
// Four ways of summing buffers of `size` bytes over the job:
//   MPI 1/proc        the peer of the flat path: one MPI_Allreduce per
//                     process, in place, blocking
//   tessera 1/proc    MpiCommunicator over a mesh of one device per process
//   MPI 2/proc        the peer of the hierarchical path: two buffers per
//                     process, summed by one thread, MPI_Allreduce, copied back
//   tessera 2/proc    the hierarchical path: two devices per process, each
//                     with its own buffer; they sum through shared memory,
//                     one of them exchanges over MPI, then both get the result
// Figures follow nccl-tests: busbw = size / time x 2(n-1)/n with n the
// processes (the bytes that must cross between them), the median of --iters
// calls (at most 15 from 16 MiB) after a warm-up, timed by process 0 between
// barriers, the best of --rounds alternating rounds per way. The last column
// is the time of plain MPI_Allreduce over Tessera's: >= 1.00 means Tessera is
// not slower. Issue 7's target: the hierarchical path not slower than the peer.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "distribution/collectives/mpi_communicator.hpp"
#include "distribution/collectives/mpi_session.hpp"
#include "distribution/device_workers.hpp"
#include "distribution/spmd_context.hpp"

namespace {

using namespace tessera;
using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::int64_t parse_size(const std::string& text) {
  std::size_t end = 0;
  const double value = std::stod(text, &end);
  const std::string unit = text.substr(end);
  const double scale = unit == "K" ? 1 << 10 : unit == "M" ? 1 << 20 : unit == "G" ? 1 << 30 : 1;
  return static_cast<std::int64_t>(value * scale);
}

// Seconds per call of plain MPI_Allreduce on `floats` floats.
double plain(std::int64_t floats, int iters) {
  std::vector<float> x(static_cast<std::size_t>(floats), 1.0f);
  std::vector<double> times;
  for (int i = 0; i <= iters; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto start = Clock::now();
    MPI_Allreduce(MPI_IN_PLACE, x.data(), static_cast<int>(floats), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    if (i > 0) times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  return median(times);
}

// Seconds per call of the plain way to sum two buffers per process over the
// job: add the second into the first, MPI_Allreduce it, copy it back.
double plain_two(std::int64_t floats, int iters) {
  std::vector<float> a(static_cast<std::size_t>(floats), 1.0f), b(static_cast<std::size_t>(floats), 1.0f);
  std::vector<double> times;
  for (int i = 0; i <= iters; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto start = Clock::now();
    for (std::size_t k = 0; k < a.size(); ++k) a[k] += b[k];
    MPI_Allreduce(MPI_IN_PLACE, a.data(), static_cast<int>(floats), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    std::memcpy(b.data(), a.data(), a.size() * sizeof(float));
    if (i > 0) times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  return median(times);
}

// Seconds per call of MpiCommunicator::all_reduce over a 1-D mesh of
// `per_process` devices in each process, each summing its own buffer.
double tessera_all_reduce(std::int64_t floats, int iters, int per_process) {
  const ProcessPlacement where = MpiSession::placement();
  DeviceMesh mesh({where.processes * per_process}, {"batch"}, cpu_devices(where.processes * per_process));
  MpiCommunicator comm(mesh, where);
  std::vector<int> local = where.local_ranks(mesh.size());
  std::vector<Tensor> buffers;
  for (std::size_t i = 0; i < local.size(); ++i) {
    buffers.push_back(Tensor::empty(Shape({floats}), DType::f32));
    std::fill_n(buffers.back().data<float>(), floats, 1.0f);
  }
  // The devices loop over the calls themselves (as a training step runs its
  // collectives back to back), each call after a barrier of the whole mesh.
  DeviceWorkers workers(local, &comm);
  std::vector<double> times;
  workers.run([&](int rank) {
    SpmdContext context(mesh, comm, rank);
    const Tensor& x = buffers[static_cast<std::size_t>(rank - local.front())];
    for (int i = 0; i <= iters; ++i) {
      comm.barrier(context.group(1), rank);
      const auto start = Clock::now();
      comm.all_reduce(context.group(1), rank, x, x);
      if (i > 0 && rank == local.front()) times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    }
  });
  return median(times);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tessera's MPI communicator against plain MPI_Allreduce (run under mpirun)"};
  std::string sizes = "4K,64K,1M,16M,64M";
  int iters = 20, rounds = 3;
  app.add_option("--sizes", sizes, "Bytes per process, comma-separated (4K, 1M, 64M)")->capture_default_str();
  app.add_option("--iters", iters, "Timed calls per size and round (at least 15 from 16 MiB)")->capture_default_str();
  app.add_option("--rounds", rounds, "Alternating rounds; each way keeps its best median")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  MpiSession mpi;
  const ProcessPlacement where = MpiSession::placement();
  const int n = where.processes;
  const bool lead = where.process == 0;
  if (lead)
    fmt::print("{} processes; busbw = size / time x 2(n-1)/n; ratio = the MPI peer's time / Tessera's\n"
               "{:>10} {:>16} {:>16} {:>9} {:>16} {:>16} {:>9}\n",
               n, "size", "MPI 1/proc", "tessera 1/proc", "ratio", "MPI 2/proc", "tessera 2/proc", "ratio");
  double worst_flat = 1e30, worst_hierarchical = 1e30;
  std::size_t start = 0;
  while (start < sizes.size()) {
    std::size_t comma = sizes.find(',', start);
    const std::string size_text = sizes.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? sizes.size() : comma + 1;
    const std::int64_t bytes = parse_size(size_text);
    const std::int64_t floats = std::max<std::int64_t>(1, bytes / 4);
    const int reps = bytes >= (16 << 20) ? std::min(iters, 15) : iters;
    // The four ways take turns, round after round, and each keeps its best
    // median: no way always runs first or last on a machine whose speed drifts.
    double t_plain = 1e30, t_one = 1e30, t_plain_two = 1e30, t_two = 1e30;
    for (int round = 0; round < rounds; ++round) {
      t_plain = std::min(t_plain, plain(floats, reps));
      t_one = std::min(t_one, tessera_all_reduce(floats, reps, 1));
      t_plain_two = std::min(t_plain_two, plain_two(floats, reps));
      t_two = std::min(t_two, tessera_all_reduce(floats, reps, 2));
    }
    auto busbw = [&](double t) { return static_cast<double>(floats * 4) / t * 2.0 * (n - 1) / n / 1e9; };
    worst_flat = std::min(worst_flat, t_plain / t_one);
    worst_hierarchical = std::min(worst_hierarchical, t_plain_two / t_two);
    if (lead)
      fmt::print("{:>10} {:>11.2f} GB/s {:>11.2f} GB/s {:>8.2f}x {:>11.2f} GB/s {:>11.2f} GB/s {:>8.2f}x\n", size_text,
                 busbw(t_plain), busbw(t_one), t_plain / t_one, busbw(t_plain_two), busbw(t_two), t_plain_two / t_two);
  }
  if (lead)
    fmt::print("at the worst size: flat path {:.2f}x the speed of MPI_Allreduce; hierarchical path {:.2f}x the speed of "
               "its MPI peer (target: not slower, >= 1.00: {})\n",
               worst_flat, worst_hierarchical, worst_hierarchical >= 1.0 ? "met" : "missed");
  return 0;
}
