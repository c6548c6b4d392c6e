// Logical devices of one GPU (cuda:0x4): the reduction kernel's body, checked
// on the host against the shared-memory kernels; the shared-memory
// communicator over kernels that run later, as a GPU stream does (simulated
// here, so the ordering a GPU needs is checked on every machine); and, in the
// GPU suite, the collectives and a training run on logical devices of GPU 0.
#include <doctest/doctest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "backends/cuda/peer_reduce.hpp"
#include "backends/registry.hpp"
#include "tessera_features.hpp"
#if TESSERA_HAVE_CUDA
#include "backends/cuda/cuda_allocator.hpp"
#include "distribution/collectives/cuda_peer_kernels.hpp"
#endif
#include "distribution/collectives/shm_communicator.hpp"
#include "distribution/collectives/shm_kernels.hpp"
#include "distribution/distribution.hpp"
#include "engine/config/config.hpp"
#include "engine/data/synthetic.hpp"
#include "engine/run/trainer.hpp"
#include "tests/on_ranks.hpp"
#include "tests/classifier.hpp"
#include "tests/gpu_test_util.hpp"
#include "tests/test_util.hpp"

using namespace tessera;
using tessera::test::on_ranks;

namespace {

std::vector<std::byte> random_bytes(DType dtype, std::int64_t count, std::mt19937& rng) {
  std::vector<std::byte> bytes(static_cast<std::size_t>(count) * dtype_size(dtype));
  std::uniform_real_distribution<float> value(-4.0f, 4.0f);
  for (std::int64_t i = 0; i < count; ++i) {
    const float v = value(rng);
    void* at = bytes.data() + static_cast<std::size_t>(i) * dtype_size(dtype);
    switch (dtype) {
      case DType::f32: std::memcpy(at, &v, 4); break;
      case DType::bf16: {
        const std::uint16_t b = to_bf16(v).bits;
        std::memcpy(at, &b, 2);
        break;
      }
      case DType::i32: {
        const auto x = static_cast<std::int32_t>(v * 1000);
        std::memcpy(at, &x, 4);
        break;
      }
      case DType::i64: {
        const auto x = static_cast<std::int64_t>(v * 1e12);
        std::memcpy(at, &x, 8);
        break;
      }
    }
  }
  return bytes;
}

// A rank's work queue: what a GPU stream would hold, run only when drained.
using Queue = std::vector<std::function<void()>>;

// Kernels that queue their work instead of doing it, and run it when the
// communicator says the writes must be done (after_writes) or the inputs
// complete (before_publish): a communicator that skipped either would read or
// leave unwritten buffers.
class DeferredKernels final : public SharedMemoryKernels {
 public:
  explicit DeferredKernels(std::shared_ptr<Queue> queue) : queue_(std::move(queue)) {}
  bool reaches(Device device) const override { return device.kind == DeviceKind::cpu; }
  std::string memory_name() const override { return "host tensors"; }
  void before_publish() override { drain(); }
  void reduce(std::span<const void* const> srcs, std::span<void* const> dsts, std::int64_t count, DType dtype,
              ReduceOp op, bool stream) override {
    queue_->push_back([this, s = std::vector(srcs.begin(), srcs.end()), d = std::vector(dsts.begin(), dsts.end()), count,
                       dtype, op, stream] { host_.reduce(s, d, count, dtype, op, stream); });
  }
  void copy(const void* src, std::span<void* const> dsts, std::size_t bytes, bool stream) override {
    queue_->push_back(
        [this, src, d = std::vector(dsts.begin(), dsts.end()), bytes, stream] { host_.copy(src, d, bytes, stream); });
  }
  void after_writes(bool streamed) override {
    drain();
    host_.after_writes(streamed);
  }

 private:
  void drain() {
    for (auto& work : *queue_) work();
    queue_->clear();
  }
  std::shared_ptr<Queue> queue_;
  ShmKernels host_;
};

}  // namespace

TEST_CASE("logical GPU devices: the peer reduction's body reduces as the shared-memory kernels do") {
  std::mt19937 rng(5);
  const std::int64_t count = 300;
  for (DType dtype : {DType::f32, DType::bf16, DType::i32, DType::i64})
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max}) {
      if (op == ReduceOp::mean && !is_floating(dtype)) continue;
      for (int sources : {1, 2, 3, 7}) {
        INFO(dtype_name(dtype) << " " << name(op) << " of " << sources);
        std::vector<std::vector<std::byte>> in;
        for (int k = 0; k < sources; ++k) in.push_back(random_bytes(dtype, count, rng));
        // Reference: the host kernels, into two destinations.
        std::vector<std::vector<std::byte>> want(2, std::vector<std::byte>(in[0].size()));
        std::vector<const void*> srcs;
        for (const auto& b : in) srcs.push_back(b.data());
        std::vector<void*> dsts{want[0].data(), want[1].data()};
        ShmKernels(false).reduce(srcs, dsts, count, dtype, op, false);
        // The element function, in place into source 0 and into a second buffer.
        std::vector<std::vector<std::byte>> got = in;
        std::vector<std::byte> other(in[0].size());
        PeerReduce r;
        for (int k = 0; k < sources; ++k) r.srcs[k] = got[static_cast<std::size_t>(k)].data();
        r.dsts[0] = got[0].data();
        r.dsts[1] = other.data();
        r.sources = sources;
        r.destinations = 2;
        r.dtype = dtype;
        r.op = op;
        for (std::int64_t i = 0; i < count; ++i) r(i);
        CHECK(got[0] == want[0]);
        CHECK(other == want[1]);
      }
    }
}

TEST_CASE("a shared-memory communicator over kernels that run later, as a GPU stream's, computes every collective") {
  for (int n : {2, 4}) {
    INFO(n << " ranks");
    std::vector<std::shared_ptr<Queue>> queues;
    for (int r = 0; r < n; ++r) queues.push_back(std::make_shared<Queue>());
    ShmCommunicator deferred(n, [&](int rank) { return std::make_unique<DeferredKernels>(queues[static_cast<std::size_t>(rank)]); });
    ShmCommunicator direct(n);
    CommGroup group{{}, "batch"};
    for (int r = 0; r < n; ++r) group.ranks.push_back(r);

    const std::int64_t rows = 4 * n, cols = 6;
    // Each rank's input is written by "its stream" before the collectives:
    // queued, so that only a before_publish makes it visible to the peers.
    struct Buffers {
      Tensor in, reduced, gathered, scattered, swapped, broadcast;
    };
    auto run = [&](Communicator& comm, bool queue_inputs) {
      std::vector<Buffers> b(static_cast<std::size_t>(n));
      auto errors = on_ranks(n, [&](int r) {
        Buffers& mine = b[static_cast<std::size_t>(r)];
        const Tensor values = test::random_tensor({rows, cols}, static_cast<unsigned>(10 + r));
        mine.in = Tensor::empty({rows, cols}, DType::f32);
        mine.broadcast = Tensor::empty({rows, cols}, DType::f32);
        auto write_input = [&mine, values] {
          std::memcpy(mine.in.raw_data(), values.raw_data(), values.nbytes());
          std::memcpy(mine.broadcast.raw_data(), values.raw_data(), values.nbytes());
        };
        if (queue_inputs) queues[static_cast<std::size_t>(r)]->push_back(write_input);
        else write_input();
        mine.reduced = Tensor::empty({rows, cols}, DType::f32);
        mine.gathered = Tensor::empty({rows, cols * n}, DType::f32);
        mine.scattered = Tensor::empty({rows / n, cols}, DType::f32);
        mine.swapped = Tensor::empty({rows / n, cols * n}, DType::f32);
        comm.all_reduce(group, r, mine.in, mine.reduced, ReduceOp::sum);
        comm.all_gather(group, r, mine.in, mine.gathered, 1);
        comm.reduce_scatter(group, r, mine.in, mine.scattered, 0, ReduceOp::max);
        comm.all_to_all(group, r, mine.in, mine.swapped, 0, 1);
        comm.broadcast(group, r, mine.broadcast, n - 1);
      });
      for (const auto& e : errors) CHECK(e.empty());
      return b;
    };
    const auto want = run(direct, false), got = run(deferred, true);
    auto same = [](const Tensor& a, const Tensor& b) { return a.to_vector<float>() == b.to_vector<float>(); };
    for (int r = 0; r < n; ++r) {
      const auto& w = want[static_cast<std::size_t>(r)];
      const auto& g = got[static_cast<std::size_t>(r)];
      INFO("rank " << r);
      CHECK(same(g.reduced, w.reduced));
      CHECK(same(g.gathered, w.gathered));
      CHECK(same(g.scattered, w.scattered));
      CHECK(same(g.swapped, w.swapped));
      CHECK(same(g.broadcast, w.broadcast));
      CHECK(queues[static_cast<std::size_t>(r)]->empty());  // every queued write was done before the call returned
    }
  }
}

TEST_CASE("a shared-memory communicator names the memory its kernels reach when a tensor is elsewhere") {
  class GpuMemory final : public SharedMemoryKernels {
   public:
    bool reaches(Device device) const override { return device.kind == DeviceKind::cuda; }
    std::string memory_name() const override { return "tensors of GPU 0"; }
    void reduce(std::span<const void* const>, std::span<void* const>, std::int64_t, DType, ReduceOp, bool) override {}
    void copy(const void*, std::span<void* const>, std::size_t, bool) override {}
    void after_writes(bool) override {}
  };
  ShmCommunicator comm(1, [](int) { return std::make_unique<GpuMemory>(); });
  Tensor x = Tensor::empty({4}, DType::f32);
  CHECK_THROWS_WITH_AS(comm.all_reduce(CommGroup{{0}, "batch"}, 0, x, x),
                       doctest::Contains("this shared-memory communicator needs tensors of GPU 0"), DeviceError);
}

TEST_CASE("a member whose kernels fail ends the collective without leaving its peers waiting") {
  // Rank 0's copies fail, as a GPU's can: rank 1 must not wait for ever at the closing barrier.
  class Failing final : public SharedMemoryKernels {
   public:
    explicit Failing(bool fail) : fail_(fail) {}
    bool reaches(Device device) const override { return device.kind == DeviceKind::cpu; }
    std::string memory_name() const override { return "host tensors"; }
    void reduce(std::span<const void* const> s, std::span<void* const> d, std::int64_t n, DType t, ReduceOp op,
                bool stream) override {
      if (fail_) throw Error("a kernel failed");
      host_.reduce(s, d, n, t, op, stream);
    }
    void copy(const void* src, std::span<void* const> d, std::size_t bytes, bool stream) override {
      host_.copy(src, d, bytes, stream);
    }
    void after_writes(bool streamed) override { host_.after_writes(streamed); }

   private:
    bool fail_;
    ShmKernels host_;
  };
  ShmCommunicator comm(2, [](int rank) { return std::make_unique<Failing>(rank == 0); });
  CommGroup group{{0, 1}, "batch"};
  std::vector<Tensor> x{test::random_tensor({64}, 1), test::random_tensor({64}, 2)};
  auto errors = on_ranks(2, [&](int r) { comm.all_reduce(group, r, x[static_cast<std::size_t>(r)], x[static_cast<std::size_t>(r)]); });
  CHECK(errors[0].find("a kernel failed") != std::string::npos);
  CHECK(errors[1].empty());  // its own slice was reduced; it left the collective
  // The communicator is aborted: the next collective fails at once on every rank.
  errors = on_ranks(2, [&](int r) { comm.barrier(group, r); });
  for (const auto& e : errors) CHECK(e.find("kernels failed") != std::string::npos);
}

#if TESSERA_HAVE_CUDA
TEST_CASE("logical devices of GPU 0: all_gather and all_reduce, and a 2x2 mesh trains to one device's losses and weights" *
          doctest::test_suite("gpu") * test::skip_without_gpu()) {
  set_cuda_logical_devices(0, 4);
  CHECK(cuda_logical_device_count() == 4);
  CHECK(cuda_gpu_of(Device::cuda(3)) == 0);
  {
    // Each has a quarter of the GPU's memory, and no more.
    const auto& allocator = dynamic_cast<CudaAllocator&>(allocator_for(Device::cuda(1)));
    REQUIRE(allocator.budget() > 0);
    CHECK_THROWS_WITH_AS(Tensor::empty({static_cast<std::int64_t>(allocator.budget() / 4 + 1)}, DType::f32, Device::cuda(1)),
                         doctest::Contains("this logical device's budget"), OutOfMemoryError);
  }
  {
    // The collectives against the host communicator's.
    const int n = 4;
    ShmCommunicator host(n);
    std::vector<Device> devices;
    for (int r = 0; r < n; ++r) devices.push_back(Device::cuda(r));
    CommGroup world{{0, 1, 2, 3}, "batch,model"};
    std::vector<Tensor> in_host, out_host, in_gpu, out_gpu;
    for (int r = 0; r < n; ++r) {
      in_host.push_back(test::random_tensor({8, 5}, static_cast<unsigned>(r + 1)));
      out_host.push_back(Tensor::empty({8, 5 * n}, DType::f32));
      in_gpu.push_back(Tensor::empty({8, 5}, DType::f32, devices[static_cast<std::size_t>(r)]));
      backend_for(devices[static_cast<std::size_t>(r)]).copy(in_host.back(), in_gpu.back());
      out_gpu.push_back(Tensor::empty({8, 5 * n}, DType::f32, devices[static_cast<std::size_t>(r)]));
    }
    // The communicator a mesh of these devices gets (distribution/spmd_program.cpp).
    ShmCommunicator gpu(n, [&](int rank) {
      return std::make_unique<CudaPeerKernels>(devices[static_cast<std::size_t>(rank)]);
    });
    auto errors = on_ranks(n, [&](int r) {
      const auto i = static_cast<std::size_t>(r);
      host.all_gather(world, r, in_host[i], out_host[i], 1);
      gpu.all_gather(world, r, in_gpu[i], out_gpu[i], 1);
      gpu.all_reduce(world, r, in_gpu[i], in_gpu[i], ReduceOp::sum);
      host.all_reduce(world, r, in_host[i], in_host[i], ReduceOp::sum);
    });
    for (const auto& e : errors) CHECK(e.empty());
    for (int r = 0; r < n; ++r) {
      const auto i = static_cast<std::size_t>(r);
      CHECK(test::to_host(out_gpu[i]).to_vector<float>() == out_host[i].to_vector<float>());
      CHECK(test::to_host(in_gpu[i]).to_vector<float>() == in_host[i].to_vector<float>());
    }
  }
  {
    // Training: a 2x2 data-parallel mesh against cuda:0 alone.
    const Model model = test::classifier();
    const Dataset data = synthetic_classification(200, {8}, 3, 1);
    const TrainingSpec spec = parse_training(ConfigNode::parse(
        "training: {loss: {type: sparse_categorical_crossentropy, from_logits: true}, optimizer: {type: adam, "
        "learning_rate: 0.01}, epochs: 2, batch_size: 16, seed: 3}")["training"]);
    DeviceMesh mesh({2, 2}, {"batch", "model"}, {Device::cuda(0), Device::cuda(1), Device::cuda(2), Device::cuda(3)});
    DataParallel distribution(mesh);
    VariableStore one_store, mesh_store;
    Trainer one(model, spec, one_store, Device::cuda(0)), on_mesh(model, spec, mesh_store, distribution);
    const auto one_logs = one.fit(data, &data), mesh_logs = on_mesh.fit(data, &data);
    for (std::size_t e = 0; e < one_logs.size(); ++e)
      CHECK(mesh_logs[e].train.loss == doctest::Approx(one_logs[e].train.loss).epsilon(1e-4));
    for (const auto& v : one_store.variables()) {
      const auto a = v.value.to_vector<float>(), b = mesh_store.find(v.path)->value.to_vector<float>();
      for (std::size_t i = 0; i < a.size(); ++i) CHECK(b[i] == doctest::Approx(a[i]).epsilon(1e-3).scale(1e-3));
    }
  }
  set_cuda_logical_devices(0, 0);
}
#endif  // TESSERA_HAVE_CUDA
