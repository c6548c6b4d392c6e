// The op table: one list of cases that covers every op of the graph IR, run
// on every compiled backend against the CPU backend (the reference), with a
// finite-difference gradient check for every differentiable op (as ggml's
// test-backend-ops does). A new op is a new case here.
//
//   - coverage: every OpKind appears in a case's graph (its forward, or the
//     backward autodiff appends), or is listed with the tests that cover it;
//   - gradients (CPU, f32): every differentiable case against central
//     differences (tests/grad_check.hpp);
//   - dtypes (CPU): every case in each of its other dtypes against the f32
//     run of the same values rounded to that dtype;
//   - GPU (test suite "gpu"): every case and dtype, forward and gradients, on
//     cuda:0 against the CPU. Without a GPU it reports skipped.
// The CPU backend's own results are checked against scalar references by
// tests/backends/cpu_*_test.cpp; here it is the reference.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "backends/registry.hpp"
#include "engine/graph/autodiff.hpp"
#include "engine/graph/executor.hpp"
#include "engine/graph/op_rules.hpp"
#include "tests/gpu_test_util.hpp"
#include "tests/grad_check.hpp"
#include "tests/test_util.hpp"

using namespace tessera;
using namespace tessera::test;

namespace {

Backend& cpu() { return backend_for(Device::cpu(0)); }

// `t` (on the CPU) converted to `dtype`.
Tensor cast_to(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor out = Tensor::empty(t.shape(), dtype);
  cpu().cast(t, out);
  return out;
}

// A case's graph under construction: leaves get random values, made in f32,
// rounded through `round_to` (so an f32 reference sees a bf16 run's inputs),
// then given the case's dtype.
struct Builder {
  Graph g;
  DType dtype = DType::f32;
  DType round_to = DType::f32;
  std::vector<std::pair<ValueId, Tensor>> leaves;
  std::vector<ValueId> updated;  // variables an update op writes (its result)

  ValueId leaf(const std::string& name, const Shape& shape, unsigned seed, float low = -1.0f, float high = 1.0f,
               bool variable = false) {
    ValueId id = variable ? g.variable(name, shape, dtype) : g.input(name, shape, dtype);
    Tensor value = cast_to(cast_to(random_tensor(shape, seed, low, high), round_to), DType::f32);
    leaves.emplace_back(id, cast_to(value, dtype));
    return id;
  }
  // Distinct values 0.05 apart in a scrambled order: a max never has a rival
  // within the finite differences' step.
  ValueId spread(const std::string& name, const Shape& shape) {
    const std::int64_t n = shape.numel();
    std::vector<float> v(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = 0.05f * static_cast<float>((i * 37) % n) - 0.025f * static_cast<float>(n);
    ValueId id = g.input(name, shape, dtype);
    leaves.emplace_back(id, cast_to(Tensor::from_vector(v, shape), dtype));
    return id;
  }
  ValueId ids(const std::string& name, const Shape& shape, std::vector<std::int32_t> values) {
    ValueId id = g.input(name, shape, DType::i32);
    leaves.emplace_back(id, Tensor::from_vector(values, shape));
    return id;
  }
};

struct OpCase {
  std::string name;
  std::vector<DType> dtypes;  // f32 first
  bool differentiable;
  std::function<ValueId(Builder&)> build;  // returns the result (-1 for an update op: see Builder::updated)
  double grad_h = 1e-2;                    // the finite differences' step
};

const std::vector<DType> kF32 = {DType::f32};
const std::vector<DType> kF32Bf16 = {DType::f32, DType::bf16};

std::vector<OpCase> op_cases() {
  std::vector<OpCase> cases;
  auto add = [&](std::string name, std::vector<DType> dtypes, bool differentiable, std::function<ValueId(Builder&)> build,
                 double grad_h = 1e-2) {
    cases.push_back({std::move(name), std::move(dtypes), differentiable, std::move(build), grad_h});
  };

  add("fill", kF32Bf16, false, [](Builder& b) { return b.g.fill({3, 5}, 0.75, b.dtype); });
  // Matmul: the transpose cases, a batch against a shared weight, alpha.
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      add(std::string("matmul") + (ta ? " a^T" : "") + (tb ? " b^T" : ""), kF32Bf16, true, [ta, tb](Builder& b) {
        ValueId a = b.leaf("a", ta ? Shape{5, 4} : Shape{4, 5}, 1);
        ValueId w = b.leaf("b", tb ? Shape{3, 5} : Shape{5, 3}, 2);
        return b.g.matmul(a, w, {.transpose_a = ta, .transpose_b = tb});
      });
  add("matmul batched x shared weight, alpha 0.5", kF32Bf16, true, [](Builder& b) {
    return b.g.matmul(b.leaf("a", {2, 3, 4}, 1), b.leaf("b", {4, 5}, 2), {.alpha = 0.5f});
  });
  add("matmul batched x batched", kF32, true, [](Builder& b) {
    return b.g.matmul(b.leaf("a", {2, 3, 4}, 1), b.leaf("b", {2, 4, 5}, 2));
  });
  add("conv2d 3x3 valid", kF32, true, [](Builder& b) {
    return b.g.conv2d(b.leaf("x", {2, 6, 5, 3}, 1), b.leaf("w", {3, 3, 3, 4}, 2), {});
  });
  add("conv2d 3x3 stride 2, padded", kF32, true, [](Builder& b) {
    return b.g.conv2d(b.leaf("x", {2, 7, 6, 2}, 1), b.leaf("w", {3, 3, 2, 3}, 2),
                      {.stride_h = 2, .stride_w = 2, .pad_top = 1, .pad_bottom = 1, .pad_left = 1, .pad_right = 1});
  });
  for (PoolKind kind : {PoolKind::max, PoolKind::avg})
    add(std::string("pool2d ") + std::string(name(kind)), kF32, true, [kind](Builder& b) {
      return b.g.pool2d(b.spread("x", {2, 6, 6, 3}), {.kind = kind});
    });

  // Unary ops, on inputs away from their kinks and poles.
  for (int u = 0; u < kUnaryOpCount; ++u) {
    const auto op = static_cast<UnaryOp>(u);
    const bool positive = op == UnaryOp::log || op == UnaryOp::sqrt || op == UnaryOp::rsqrt || op == UnaryOp::reciprocal;
    add(std::string("unary ") + std::string(name(op)), kF32, true, [op, positive](Builder& b) {
      return b.g.unary(op, positive ? b.leaf("x", {3, 7}, 1, 0.5f, 2.0f) : b.leaf("x", {3, 7}, 1, 0.1f, 1.0f));
    });
  }
  add("unary relu, both signs", kF32, true, [](Builder& b) {
    // Values 0.025 or more from 0: central differences with h = 1e-2 never cross the kink.
    return b.g.unary(UnaryOp::relu, b.spread("x", {3, 7}));
  });

  // Binary ops with broadcasting (a row against a matrix).
  for (int o = 0; o < kBinaryOpCount; ++o) {
    const auto op = static_cast<BinaryOp>(o);
    const bool differentiable = op != BinaryOp::equal && op != BinaryOp::greater;
    add(std::string("binary ") + std::string(name(op)) + " broadcast", kF32Bf16, differentiable, [op](Builder& b) {
      ValueId x = b.leaf("a", {4, 5}, 1);
      // b away from 0 (div) and from a (max, min: a tie has no derivative).
      ValueId y = b.leaf("b", {5}, 2, 1.5f, 2.5f);
      if (op == BinaryOp::equal) return b.g.binary(op, x, x);
      return b.g.binary(op, x, y);
    });
  }
  for (int r = 0; r < kReduceOpCount; ++r) {
    const auto op = static_cast<ReduceOp>(r);
    add(std::string("reduce ") + std::string(name(op)) + " over axes 0 and 2", kF32, true, [op](Builder& b) {
      return b.g.reduce(op, b.spread("x", {3, 4, 5}), {0, 2});
    });
  }
  add("broadcast_to", kF32Bf16, true, [](Builder& b) { return b.g.broadcast_to(b.leaf("x", {1, 5}, 1), {3, 5}); });
  add("reshape", kF32Bf16, true, [](Builder& b) {
    return b.g.add(b.g.reshape(b.leaf("x", {3, 4}, 1), {2, 6}), b.leaf("y", {2, 6}, 2));
  });
  add("transpose", kF32Bf16, true, [](Builder& b) { return b.g.transpose(b.leaf("x", {2, 3, 4}, 1), {2, 0, 1}); });
  for (bool log : {false, true})
    for (int axis : {-1, 0})
      add(std::string(log ? "log_softmax" : "softmax") + " axis " + std::to_string(axis), kF32, true,
          [log, axis](Builder& b) { return b.g.softmax(b.leaf("x", {3, 5}, 1, -2.0f, 2.0f), axis, log); });
  add("layer_norm", kF32, true, [](Builder& b) {
    ValueId x = b.leaf("x", {4, 6}, 1);
    return b.g.layer_norm(x, b.leaf("gamma", {6}, 2, 0.5f, 1.5f), b.leaf("beta", {6}, 3))[0];
  });
  add("embedding", kF32, true, [](Builder& b) {
    return b.g.embedding(b.leaf("table", {6, 4}, 1), b.ids("ids", {2, 3}, {0, 5, 2, 2, 4, 1}));
  });
  add("one_hot", kF32, false, [](Builder& b) { return b.g.one_hot(b.ids("ids", {4}, {3, 0, 2, 3}), 5, b.dtype); });
  add("cast to bf16 and back", kF32, true, [](Builder& b) {
    // Eighths, and (grad_h) steps of an eighth: every value the finite
    // differences try is exact in bf16, so rounding does not blur them.
    std::vector<float> v;
    for (int i = 0; i < 12; ++i) v.push_back(static_cast<float>(i - 6) / 8.0f);
    ValueId x = b.g.input("x", {3, 4}, b.dtype);
    b.leaves.emplace_back(x, cast_to(Tensor::from_vector(v, {3, 4}), b.dtype));
    return b.g.cast(b.g.cast(x, DType::bf16), DType::f32);
  }, 0.125);
  add("concat", kF32, true, [](Builder& b) {
    return b.g.concat({b.leaf("a", {2, 3}, 1), b.leaf("b", {2, 2}, 2), b.leaf("c", {2, 1}, 3)}, 1);
  });
  add("slice", kF32, true, [](Builder& b) { return b.g.slice(b.leaf("x", {3, 7}, 1), 1, 2, 4); });
  add("dropout", kF32, true, [](Builder& b) { return b.g.dropout(b.leaf("x", {4, 16}, 1), 0.25f, 42); });

  // Updates write their variables in place: the result is the variables.
  add("sgd_update, nesterov", kF32, false, [](Builder& b) {
    ValueId p = b.leaf("param", {3, 4}, 1, -1.0f, 1.0f, true), v = b.leaf("velocity", {3, 4}, 3, -0.1f, 0.1f, true);
    b.g.sgd_update(p, b.leaf("grad", {3, 4}, 2), v, {.learning_rate = 0.1f, .momentum = 0.9f, .nesterov = true, .weight_decay = 0.01f});
    b.updated = {p, v};
    return ValueId{-1};
  });
  add("adam_update", kF32, false, [](Builder& b) {
    ValueId p = b.leaf("param", {3, 4}, 1, -1.0f, 1.0f, true), m = b.leaf("m", {3, 4}, 3, -0.1f, 0.1f, true);
    ValueId v = b.leaf("v", {3, 4}, 4, 0.0f, 0.1f, true);
    b.g.adam_update(p, b.leaf("grad", {3, 4}, 2), m, v, {.learning_rate = 0.01f, .weight_decay = 0.01f, .decoupled_weight_decay = true, .step = 3});
    b.updated = {p, m, v};
    return ValueId{-1};
  });
  add("moving_average", kF32, false, [](Builder& b) {
    ValueId state = b.leaf("state", {5}, 1, -1.0f, 1.0f, true);
    b.g.moving_average(state, b.leaf("value", {5}, 2), 0.9f);
    b.updated = {state};
    return ValueId{-1};
  });
  return cases;
}

// Ops a single-device graph cannot hold: they run on a partitioned graph, per
// device, and are checked by the distribution tests named here.
const std::map<OpKind, std::string> kCoveredElsewhere = {
    {OpKind::all_reduce, "distribution/communicator_test.cpp, sharded_training_test.cpp"},
    {OpKind::all_gather, "distribution/communicator_test.cpp, sharded_training_test.cpp"},
    {OpKind::reduce_scatter, "distribution/communicator_test.cpp, sharded_training_test.cpp (fully sharded)"},
    {OpKind::all_to_all, "distribution/communicator_test.cpp, resharding_test.cpp"},
    {OpKind::shard_slice, "distribution/sharded_training_test.cpp, resharding_test.cpp"},
    {OpKind::block_view, "distribution/sharded_training_test.cpp (ZeRO-1)"},
    {OpKind::all_gather_into, "distribution/sharded_training_test.cpp (ZeRO-1)"},
};

// A built case: its graph, its result and (for differentiable f32 cases) the
// gradient of sum(result * probe) with respect to each floating leaf.
struct Run {
  Builder b;
  ValueId out = -1, probe = -1;
  std::vector<ValueId> grads;
  std::vector<ValueId> outputs;
};

std::unique_ptr<Run> build(const OpCase& c, DType dtype, DType round_to, bool with_grads) {
  auto r = std::make_unique<Run>();
  r->b.dtype = dtype;
  r->b.round_to = round_to;
  r->out = c.build(r->b);
  if (r->out >= 0) r->outputs.push_back(r->out);
  if (with_grads && c.differentiable) {
    Graph& g = r->b.g;
    r->probe = g.input("probe", g.shape(r->out), dtype);
    std::vector<int> axes(static_cast<std::size_t>(g.shape(r->out).rank()));
    for (std::size_t i = 0; i < axes.size(); ++i) axes[i] = static_cast<int>(i);
    ValueId loss = g.reduce(ReduceOp::sum, g.mul(r->out, r->probe), axes);
    std::vector<ValueId> wrt;
    for (const auto& [id, t] : r->b.leaves)
      if (is_floating(t.dtype())) wrt.push_back(id);
    auto grads = append_gradients(g, loss, wrt);
    for (ValueId id : wrt) r->grads.push_back(grads.at(id));
    r->outputs.insert(r->outputs.end(), r->grads.begin(), r->grads.end());
  }
  return r;
}

// Runs `r` once on `device` (leaves copied there) and returns its outputs,
// then its updated variables, as f32 host vectors.
std::vector<std::vector<float>> run_on(Run& r, Device device) {
  // A copy on the device: update ops write their variables, and each run starts from the case's values.
  auto on_device = [&](const Tensor& host) {
    if (device.kind != DeviceKind::cpu) return to_gpu(host);
    Tensor copy = Tensor::empty(host.shape(), host.dtype());
    cpu().copy(host, copy);
    return copy;
  };
  Executor exec(r.b.g, r.outputs, device);
  exec.set_update_step(1, 0.0f);
  std::map<ValueId, Tensor> bound;
  for (const auto& [id, t] : r.b.leaves) exec.bind(id, bound[id] = on_device(t));
  if (r.probe >= 0)
    exec.bind(r.probe, on_device(cast_to(random_tensor(r.b.g.shape(r.probe), 1234, 0.5f, 1.5f), r.b.dtype)));
  exec.run();
  std::vector<std::vector<float>> results;
  auto host_f32 = [&](const Tensor& t) {
    return cast_to(device.kind == DeviceKind::cpu ? t : to_host(t), DType::f32).to_vector<float>();
  };
  for (ValueId v : r.outputs) results.push_back(host_f32(exec.output(v)));
  for (ValueId v : r.b.updated) results.push_back(host_f32(bound.at(v)));
  return results;
}

void check_same(const std::vector<std::vector<float>>& actual, const std::vector<std::vector<float>>& expected,
                double rtol, double atol) {
  REQUIRE(actual.size() == expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i) {
    INFO("result " << i << " (the op's output first, then gradients or updated variables)");
    check_close(actual[i], expected[i], rtol, atol);
  }
}

// The kernels of `r`'s nodes that `backend` says it lacks (supports() asked
// with the node's op kind and result dtype: an update's parameter's).
std::set<std::string> unsupported_kernels(const Run& r, const Backend& backend) {
  std::set<std::string> missing;
  const Graph& g = r.b.g;
  for (NodeId n = 0; n < g.node_count(); ++n) {
    const Node& node = g.node(n);
    const OpInfo& info = op_info(node.kind);
    if (info.bound || info.view || info.collective) continue;  // no kernel runs
    const DType dtype = g.dtype(node.outputs.empty() ? node.inputs[0] : node.outputs[0]);
    if (!backend.supports(node.kind, dtype)) missing.insert(std::string(name(node.kind)) + " " + std::string(dtype_name(dtype)));
  }
  return missing;
}

// bf16 keeps 8 bits of mantissa: a result within a few of its roundings.
double rtol_of(DType dtype) { return dtype == DType::bf16 ? 2e-2 : 1e-4; }
double atol_of(DType dtype) { return dtype == DType::bf16 ? 2e-2 : 1e-5; }

}  // namespace

TEST_CASE("op table: every op of the graph IR has a case, or names the tests that cover it") {
  std::set<OpKind> covered;
  for (const OpCase& c : op_cases()) {
    auto r = build(c, DType::f32, DType::f32, /*with_grads=*/true);
    for (NodeId n = 0; n < r->b.g.node_count(); ++n) covered.insert(r->b.g.node(n).kind);
  }
  for (int k = 0; k < kOpKindCount; ++k) {
    const auto kind = static_cast<OpKind>(k);
    INFO("op " << name(kind));
    CHECK((covered.contains(kind) != kCoveredElsewhere.contains(kind)));
    CHECK(!op_info(kind).name.empty());            // its entry in the op table (backends/op_kinds.cpp)
    CHECK(static_cast<bool>(op_rules(kind).run));  // every op runs (engine/graph/ops/)
  }
  std::size_t pairs = 0, differentiable = 0;
  for (const OpCase& c : op_cases()) {
    pairs += c.dtypes.size();
    differentiable += c.differentiable ? 1 : 0;
  }
  MESSAGE(op_cases().size() << " cases over " << covered.size() << " of " << kOpKindCount << " op kinds ("
                            << kCoveredElsewhere.size() << " collectives and views covered elsewhere), " << pairs
                            << " case x dtype pairs, " << differentiable << " cases with a gradient check");
}

TEST_CASE("op table: every differentiable case's gradients match finite differences") {
  for (const OpCase& c : op_cases()) {
    if (!c.differentiable) continue;
    INFO("case " << c.name);
    Builder b;
    ValueId out = c.build(b);
    check_gradients(b.g, out, b.leaves, {.h = c.grad_h});
  }
}

TEST_CASE("op table: every case in its other dtypes matches f32 on the same rounded values") {
  int checked = 0;
  for (const OpCase& c : op_cases())
    for (DType dtype : c.dtypes) {
      if (dtype == DType::f32) continue;
      INFO("case " << c.name << " in " << dtype_name(dtype));
      auto low = build(c, dtype, dtype, /*with_grads=*/false);
      auto reference = build(c, DType::f32, dtype, /*with_grads=*/false);
      check_same(run_on(*low, Device::cpu(0)), run_on(*reference, Device::cpu(0)), rtol_of(dtype), atol_of(dtype));
      ++checked;
    }
  CHECK(checked >= 10);
}

TEST_CASE("op table: the CPU backend says it supports every case in each of its dtypes") {
  // The GPU half skips what a backend says it lacks: the CPU, the reference,
  // runs every case here, so what it says must hold.
  for (const OpCase& c : op_cases())
    for (DType dtype : c.dtypes) {
      INFO("case " << c.name << " in " << dtype_name(dtype));
      for (bool grads : {false, dtype == DType::f32}) CHECK(unsupported_kernels(*build(c, dtype, dtype, grads), cpu()).empty());
    }
}

TEST_CASE("op table: every case and dtype on the GPU matches the CPU, gradients included" * doctest::test_suite("gpu") *
          skip_without_gpu()) {
  std::set<std::string> skipped;
  for (const OpCase& c : op_cases())
    for (DType dtype : c.dtypes) {
      INFO("case " << c.name << " in " << dtype_name(dtype));
      const bool grads = dtype == DType::f32;
      auto on_gpu = build(c, dtype, dtype, grads);
      const auto missing = unsupported_kernels(*on_gpu, backend_for(Device::cuda(0)));
      if (!missing.empty()) {  // kernels not written yet: listed, not failed
        skipped.insert(c.name + " in " + std::string(dtype_name(dtype)) + " (lacks " + *missing.begin() + ")");
        continue;
      }
      auto on_cpu = build(c, dtype, dtype, grads);
      check_same(run_on(*on_gpu, Device::cuda(0)), run_on(*on_cpu, Device::cpu(0)), rtol_of(dtype), atol_of(dtype));
    }
  for (const std::string& s : skipped) MESSAGE("not on cuda:0 yet: " << s);
  // Every case runs on the GPU in f32: only bf16 kernels may be missing.
  for (const std::string& s : skipped) CHECK(s.find(" in f32 ") == std::string::npos);
}
