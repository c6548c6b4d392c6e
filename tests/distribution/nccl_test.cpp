// The NCCL communicator on this machine's GPUs (the GPU suite: skipped where
// there is none). It must form the shared-memory communicator's groups and
// compute the same collectives.
#include <doctest/doctest.h>

#include <functional>
#include <thread>

#include "backends/registry.hpp"

#include "tessera_features.hpp"
#if TESSERA_HAVE_NCCL
#include "backends/cuda/cuda_backend.hpp"
#include "distribution/collectives/nccl_communicator.hpp"
#include "distribution/spmd_context.hpp"
#include "tests/on_ranks.hpp"
#include "tests/gpu_test_util.hpp"

using namespace tessera;
using tessera::test::on_ranks;
using tessera::test::skip_without_gpu;

TEST_CASE("nccl communicator: all_reduce, all_gather, reduce_scatter and broadcast over every GPU" *
          doctest::test_suite("gpu") * skip_without_gpu()) {
  const int n = cuda_device_count();
  std::vector<Device> gpus;
  std::vector<CUstream_st*> streams;
  for (int i = 0; i < n; ++i) {
    gpus.push_back(Device::cuda(i));
    streams.push_back(static_cast<CudaBackend&>(backend_for(gpus.back())).stream());
  }
  DeviceMesh mesh({n}, {"batch"}, gpus);
  NcclCommunicator comm(mesh, streams);
  std::vector<SpmdContext> contexts;
  for (int r = 0; r < n; ++r) contexts.emplace_back(mesh, comm, r);
  const std::int64_t block = 7;  // odd on purpose
  std::vector<Tensor> in, reduced, gathered, scattered;
  for (int r = 0; r < n; ++r) {
    std::vector<float> values(static_cast<std::size_t>(block * n));
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(r * 100 + static_cast<int>(i));
    Tensor host = Tensor::from_vector(values, {block * n});
    Tensor device = Tensor::empty(host.shape(), DType::f32, gpus[static_cast<std::size_t>(r)]);
    backend_for(gpus[static_cast<std::size_t>(r)]).copy(host, device);
    in.push_back(device);
    reduced.push_back(Tensor::empty({block * n}, DType::f32, gpus[static_cast<std::size_t>(r)]));
    gathered.push_back(Tensor::empty({block * n * n}, DType::f32, gpus[static_cast<std::size_t>(r)]));
    scattered.push_back(Tensor::empty({block}, DType::f32, gpus[static_cast<std::size_t>(r)]));
  }
  auto errors = on_ranks(n, [&](int r) {
    const CommGroup& world = contexts[static_cast<std::size_t>(r)].group(1);
    comm.all_reduce(world, r, in[static_cast<std::size_t>(r)], reduced[static_cast<std::size_t>(r)], ReduceOp::sum);
    comm.all_gather(world, r, in[static_cast<std::size_t>(r)], gathered[static_cast<std::size_t>(r)], 0);
    comm.reduce_scatter(world, r, in[static_cast<std::size_t>(r)], scattered[static_cast<std::size_t>(r)], 0, ReduceOp::sum);
  });
  for (const auto& e : errors) CHECK(e.empty());
  for (int r = 0; r < n; ++r) {
    auto host = [&](const Tensor& t) {
      Tensor h = Tensor::empty(t.shape(), DType::f32);
      backend_for(t.device()).copy(t, h);
      return h.to_vector<float>();
    };
    const auto sum = host(reduced[static_cast<std::size_t>(r)]);
    const auto all = host(gathered[static_cast<std::size_t>(r)]);
    const auto mine = host(scattered[static_cast<std::size_t>(r)]);
    for (std::int64_t i = 0; i < block * n; ++i) {
      float expected = 0;
      for (int q = 0; q < n; ++q) expected += static_cast<float>(q * 100 + i);
      CHECK(sum[static_cast<std::size_t>(i)] == expected);
      if (i / block == r) CHECK(mine[static_cast<std::size_t>(i - r * block)] == expected);
    }
    for (std::int64_t i = 0; i < block * n * n; ++i)
      CHECK(all[static_cast<std::size_t>(i)] == static_cast<float>((i / (block * n)) * 100 + i % (block * n)));
  }
}

TEST_CASE("nccl communicator: a rank that never arrives is an error after the timeout" * doctest::test_suite("gpu") *
          skip_without_gpu()) {
  const int n = cuda_device_count();
  if (n < 2) return;  // one GPU: nobody can be missing
  std::vector<Device> gpus;
  std::vector<CUstream_st*> streams;
  for (int i = 0; i < n; ++i) {
    gpus.push_back(Device::cuda(i));
    streams.push_back(static_cast<CudaBackend&>(backend_for(gpus.back())).stream());
  }
  DeviceMesh mesh({n}, {"batch"}, gpus);
  NcclCommunicator comm(mesh, streams);
  comm.set_timeout(std::chrono::milliseconds(500));
  SpmdContext context(mesh, comm, 0);
  Tensor x = Tensor::empty({4}, DType::f32, gpus[0]);
  CHECK_THROWS_WITH_AS(comm.all_reduce(context.group(1), 0, x, x, ReduceOp::sum),
                       doctest::Contains("did not complete on rank 0"), CollectiveError);
}

#endif  // TESSERA_HAVE_NCCL
