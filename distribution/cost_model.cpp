#include "distribution/cost_model.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include "backends/cpu/cpu_backend.hpp"
#include "distribution/collectives/shm_communicator.hpp"
#include "engine/graph/op_rules.hpp"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

// Best time of `runs` calls of f, in seconds.
template <typename F>
double best_of(int runs, F&& f) {
  double best = 1e30;
  for (int i = 0; i < runs; ++i) {
    auto start = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return best;
}

double bytes_of(const Graph& g, ValueId v) {
  return static_cast<double>(g.shape(v).numel()) * static_cast<double>(dtype_size(g.dtype(v)));
}

// FLOPs of the matmul-like ops (their op rules count them); 0 for the memory-bound rest.
std::int64_t flops_of(const Graph& g, const Node& node) {
  const FlopsRule flops = op_rules(node.kind).flops;
  return flops != nullptr ? flops(g, node) : 0;
}

}  // namespace

std::int64_t bus_bytes(OpKind kind, std::int64_t bytes, std::int64_t members) {
  if (members <= 1) return 0;
  // As the communicator counts them (integer division per share).
  std::int64_t share = bytes * (members - 1) / members;
  return kind == OpKind::all_reduce ? 2 * share : share;
}

Calibration measure_calibration() {
  Calibration c;
  c.cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  CpuBackend cpu(Device::cpu(0), 1);
  {
    const std::int64_t n = 512;
    Tensor a = Tensor::empty({n, n}, DType::f32), b = Tensor::empty({n, n}, DType::f32), out = Tensor::empty({n, n}, DType::f32);
    cpu.fill(a, 0.5);
    cpu.fill(b, 0.25);
    cpu.matmul(a, b, nullptr, out);  // the first call builds the kernel (a oneDNN primitive, or sgemm's code)
    c.matmul_gflops_per_thread = 2.0 * n * n * n / best_of(5, [&] { cpu.matmul(a, b, nullptr, out); }) / 1e9;
  }
  {
    const std::int64_t n = 4 << 20;  // three 16 MiB buffers: past the caches
    Tensor a = Tensor::empty({n}, DType::f32), b = Tensor::empty({n}, DType::f32), out = Tensor::empty({n}, DType::f32);
    cpu.fill(a, 1.0);
    cpu.fill(b, 2.0);
    cpu.binary(BinaryOp::add, a, b, out);
    c.memory_gbps_per_thread = 3.0 * 4 * n / best_of(5, [&] { cpu.binary(BinaryOp::add, a, b, out); }) / 1e9;
  }
  {
    ShmCommunicator comm(2);
    const CommGroup group{{0, 1}, "probe"};
    const std::int64_t n = 2 << 20;  // 8 MiB
    std::vector<Tensor> buffers{Tensor::empty({n}, DType::f32), Tensor::empty({n}, DType::f32)};
    std::vector<Tensor> tiny{Tensor::empty({1}, DType::f32), Tensor::empty({1}, DType::f32)};
    for (auto& t : buffers) cpu.fill(t, 1.0);
    for (auto& t : tiny) cpu.fill(t, 1.0);
    auto on_both = [&](auto&& call) {
      std::thread peer([&] { call(1); });
      call(0);
      peer.join();
    };
    auto big = [&](int r) { comm.all_reduce(group, r, buffers[static_cast<std::size_t>(r)], buffers[static_cast<std::size_t>(r)]); };
    auto small = [&](int r) {
      for (int i = 0; i < 100; ++i) comm.all_reduce(group, r, tiny[static_cast<std::size_t>(r)], tiny[static_cast<std::size_t>(r)]);
    };
    on_both(big);
    c.link_gbps = static_cast<double>(bus_bytes(OpKind::all_reduce, 4 * n, 2)) / best_of(3, [&] { on_both(big); }) / 1e9;
    c.collective_latency_us = best_of(3, [&] { on_both(small); }) / 100 * 1e6;
  }
  return c;
}

StepCost predict_step(const SpmdProgram& program, const Calibration& calibration, int threads_per_device) {
  const Graph& g = program.partition().local;
  const DeviceMesh& mesh = program.mesh();
  const double devices = static_cast<double>(mesh.size());
  const double threads = std::max(1, threads_per_device);
  // Devices sharing cores take turns.
  const double slowdown = std::max(1.0, devices * threads / std::max(1, calibration.cores));
  const double flops_per_s = calibration.matmul_gflops_per_thread * 1e9 * threads / slowdown;
  const double bytes_per_s = calibration.memory_gbps_per_thread * 1e9 * threads / slowdown;
  StepCost cost;
  for (NodeId n : program.schedule()) {
    const Node& node = g.node(n);
    const OpInfo& op = op_info(node.kind);
    if (op.bound || op.view) continue;  // nothing runs, or nothing moves
    if (op.collective) {
      std::int64_t members = 1;
      for (int a = 0; a < mesh.rank(); ++a)
        if (node.attrs.mesh_axes & (1u << a)) members *= mesh.shape()[static_cast<std::size_t>(a)];
      ValueId operand = node.kind == OpKind::all_gather         ? node.outputs[0]
                        : node.kind == OpKind::all_gather_into ? node.inputs[1]  // the whole it gathers into
                                                               : node.inputs[0];
      std::int64_t bytes = bus_bytes(node.kind, static_cast<std::int64_t>(bytes_of(g, operand)), members);
      cost.collective_bytes[std::string(collective_name(node.kind)) + " " + axes_label(node.attrs.mesh_axes, mesh)] += bytes;
      cost.communication_seconds += calibration.collective_latency_us * 1e-6 + static_cast<double>(bytes) / (calibration.link_gbps * 1e9);
      continue;
    }
    std::int64_t flops = flops_of(g, node);
    cost.flops += flops;
    if (flops > 0) {
      cost.compute_seconds += static_cast<double>(flops) / flops_per_s;
    } else {
      double bytes = 0;
      for (ValueId v : node.inputs) bytes += bytes_of(g, v);
      for (ValueId v : node.outputs) bytes += bytes_of(g, v);
      if (op.side_effect) bytes *= 2;  // state written back in place
      cost.compute_seconds += bytes / bytes_per_s;
    }
  }
  return cost;
}

}  // namespace tessera
