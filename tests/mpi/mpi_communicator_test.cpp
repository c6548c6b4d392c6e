// The MPI communicator under mpirun: every collective over every group of a
// 2x2 mesh (and of a 4x2 one) against values worked out by hand, whichever
// processes hold the devices: 1 process (shared memory only), 2 (each group of
// the batch axis crosses processes, the model axis stays inside), 4 (every
// device its own process) or 8.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "distribution/collectives/mpi_communicator.hpp"
#include "distribution/collectives/mpi_session.hpp"
#include "distribution/collectives/shm_communicator.hpp"
#include "tessera_features.hpp"
#if TESSERA_HAVE_NCCL
#include "distribution/collectives/nccl_communicator.hpp"
#endif
#include "distribution/device_workers.hpp"
#include "distribution/spmd_context.hpp"

namespace tessera {
namespace {

// The value member `rank` contributes at element i.
float value_of(int rank, std::int64_t i) { return static_cast<float>(rank * 100 + i); }

Tensor filled(const Shape& shape, int rank) {
  Tensor t = Tensor::empty(shape, DType::f32);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = value_of(rank, i);
  return t;
}

// Whether the job's processes can share a mesh of `devices` (8 processes cannot share 4 devices).
bool fits(std::int64_t devices) {
  const bool ok = devices % MpiSession::placement().processes == 0;
  if (!ok) MESSAGE("not run: ", MpiSession::placement().processes, " processes cannot share ", devices, " devices");
  return ok;
}

struct Job {
  DeviceMesh mesh;
  ProcessPlacement where = MpiSession::placement();
  std::unique_ptr<Communicator> comm;
  std::vector<int> local;
  explicit Job(std::vector<std::int64_t> shape)
      : mesh(shape, {"batch", "model"}, cpu_devices(static_cast<int>(shape[0] * shape[1]))) {
    REQUIRE(mesh.size() % where.processes == 0);
    comm = where.multi_process() ? std::unique_ptr<Communicator>(std::make_unique<MpiCommunicator>(mesh, where))
                                 : std::make_unique<ShmCommunicator>(static_cast<int>(mesh.size()));
    comm->set_timeout(std::chrono::seconds(20));
    local = where.local_ranks(mesh.size());
  }
  // Runs f(rank, group) on this process's devices at once, for the group of each axes set.
  template <typename F>
  void each_group(F f) {
    DeviceWorkers workers(local, comm.get());
    for (std::uint32_t mask = 1; mask < (1u << mesh.rank()); ++mask)
      workers.run([&](int rank) {
        SpmdContext context(mesh, *comm, rank);
        f(rank, context.group(mask));
      });
  }
};

void check_collectives(Job& job) {
  job.each_group([&](int rank, const CommGroup& g) {
    const int n = g.size(), me = g.index_of(rank);
    // all_reduce, sum and mean, out of place and in place
    Tensor in = filled(Shape({3, 5}), rank), out = Tensor::empty(Shape({3, 5}), DType::f32);
    job.comm->all_reduce(g, rank, in, out);
    for (std::int64_t i = 0; i < 15; ++i) {
      float sum = 0;
      for (int r : g.ranks) sum += value_of(r, i);
      CHECK(out.data<float>()[i] == doctest::Approx(sum));
    }
    job.comm->all_reduce(g, rank, in, in, ReduceOp::mean);
    for (std::int64_t i = 0; i < 15; ++i) CHECK(in.data<float>()[i] == doctest::Approx(out.data<float>()[i] / n));
    // all_reduce max
    Tensor mx = filled(Shape({4}), rank);
    job.comm->all_reduce(g, rank, mx, mx, ReduceOp::max);
    for (std::int64_t i = 0; i < 4; ++i) {
      float most = value_of(g.ranks.front(), i);
      for (int r : g.ranks) most = std::max(most, value_of(r, i));
      CHECK(mx.data<float>()[i] == most);
    }
    // bf16 sum
    Tensor h = Tensor::from_vector<bf16>({to_bf16(1.0f), to_bf16(static_cast<float>(rank))}, Shape({2}));
    job.comm->all_reduce(g, rank, h, h);
    float rank_sum = 0;
    for (int r : g.ranks) rank_sum += static_cast<float>(r);
    CHECK(to_f32(h.data<bf16>()[0]) == static_cast<float>(n));
    CHECK(to_f32(h.data<bf16>()[1]) == rank_sum);
    // all_gather along dim 1: member j's [2, 3] block at columns 3j..3j+2
    Tensor gathered = Tensor::empty(Shape({2, 3 * n}), DType::f32);
    job.comm->all_gather(g, rank, filled(Shape({2, 3}), rank), gathered, 1);
    for (int j = 0; j < n; ++j)
      for (std::int64_t r = 0; r < 2; ++r)
        for (std::int64_t c = 0; c < 3; ++c)
          CHECK(gathered.data<float>()[r * 3 * n + j * 3 + c] == value_of(g.ranks[static_cast<std::size_t>(j)], r * 3 + c));
    // reduce_scatter along dim 1: this member's columns of the sum
    Tensor scattered = Tensor::empty(Shape({2, 2}), DType::f32);
    job.comm->reduce_scatter(g, rank, filled(Shape({2, 2 * n}), rank), scattered, 1);
    for (std::int64_t r = 0; r < 2; ++r)
      for (std::int64_t c = 0; c < 2; ++c) {
        float sum = 0;
        for (int peer : g.ranks) sum += value_of(peer, r * 2 * n + me * 2 + c);
        CHECK(scattered.data<float>()[r * 2 + c] == doctest::Approx(sum));
      }
    // broadcast from the last member
    Tensor b = filled(Shape({6}), rank);
    job.comm->broadcast(g, rank, b, n - 1);
    for (std::int64_t i = 0; i < 6; ++i) CHECK(b.data<float>()[i] == value_of(g.ranks.back(), i));
    // all_to_all: split rows [n*2, 3], join along columns: out [2, 3n], block i from member i
    Tensor a2a = Tensor::empty(Shape({2, 3 * n}), DType::f32);
    job.comm->all_to_all(g, rank, filled(Shape({2 * n, 3}), rank), a2a, 0, 1);
    for (int i = 0; i < n; ++i)
      for (std::int64_t r = 0; r < 2; ++r)
        for (std::int64_t c = 0; c < 3; ++c)
          CHECK(a2a.data<float>()[r * 3 * n + i * 3 + c] ==
                value_of(g.ranks[static_cast<std::size_t>(i)], (me * 2 + r) * 3 + c));
    job.comm->barrier(g, rank);
  });
}

TEST_CASE("mpi communicator: every collective over every group of a 2x2 mesh") {
  if (!fits(4)) return;
  Job job({2, 2});
  check_collectives(job);
}

TEST_CASE("mpi communicator: every collective over every group of a 4x2 mesh") {
  if (!fits(8)) return;
  Job job({4, 2});
  check_collectives(job);
}

TEST_CASE("mpi communicator: accounting separates bytes between processes") {
  if (!fits(4)) return;
  Job job({2, 2});
  job.each_group([&](int rank, const CommGroup& g) {
    Tensor x = filled(Shape({1024}), rank);
    job.comm->all_reduce(g, rank, x, x);
  });
  std::int64_t inter = 0, bytes = 0;
  for (const auto& [key, stats] : job.comm->accounting().total()) {
    inter += stats.inter_process_bytes;
    bytes += stats.bytes;
  }
  CHECK(bytes > 0);
  if (job.where.multi_process())
    CHECK(inter > 0);
  else
    CHECK(inter == 0);
}

TEST_CASE("mpi communicator: the timeout it is given governs groups inside one process") {
  // On 2 processes each holds a row of a 2x2 mesh: the model axis stays inside
  // a process. Device 1 of this process never arrives; device 0 gives up after
  // the timeout given (the in-process part once kept its own 60 s).
  const ProcessPlacement where = MpiSession::placement();
  if (where.processes != 2) {
    MESSAGE("not run: needs 2 processes, this job has ", where.processes);
    return;
  }
  const DeviceMesh mesh({2, 2}, {"batch", "model"}, cpu_devices(4));
  MpiCommunicator comm(mesh, where);
  comm.set_timeout(std::chrono::milliseconds(300));
  const int rank = where.local_ranks(mesh.size()).front();
  SpmdContext context(mesh, comm, rank);
  Tensor x = filled(Shape({8}), rank);
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(comm.all_reduce(context.group(0b10), rank, x, x), doctest::Contains("did not arrive"),
                       CollectiveError);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
}

}  // namespace
}  // namespace tessera

#if TESSERA_HAVE_NCCL
namespace tessera {
namespace {

TEST_CASE("nccl unique id: every process of the job gets the id process 0 drew") {
  // ncclGetUniqueId needs no GPU: the bootstrap of a multi-process NCCL
  // communicator runs here; ncclCommInitRank itself waits for a GPU machine.
  const std::vector<std::byte> id = nccl_job_unique_id(std::chrono::minutes(1));
  REQUIRE(id.size() == 128);
  double checksum = 0;
  for (std::size_t i = 0; i < id.size(); ++i) checksum += static_cast<double>(std::to_integer<int>(id[i])) * static_cast<double>(i + 1);
  CHECK(checksum > 0);  // process 0 drew one
  // Equal on every process iff the sum of squares is n x the square (no spread).
  double sums[2] = {checksum, checksum * checksum};
  MpiSession::sum_over_processes(sums, std::chrono::minutes(1));
  const double n = MpiSession::placement().processes;
  CHECK(sums[0] == n * checksum);
  CHECK(sums[1] == n * checksum * checksum);
}

}  // namespace
}  // namespace tessera
#endif
