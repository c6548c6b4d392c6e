// Graph building (shape and dtype inference, errors), memory planning and
// the executor's allocation behaviour.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <thread>

#include "backends/registry.hpp"
#include "engine/graph/autodiff.hpp"
#include "engine/graph/executor.hpp"
#include "tests/test_util.hpp"

using namespace tessera;
using namespace tessera::test;

TEST_CASE("graph builders infer shapes and dtypes") {
  Graph g;
  ValueId x = g.input("x", {8, 16});
  ValueId w = g.variable("dense/kernel", {16, 4});
  ValueId y = g.matmul(x, w);
  CHECK(g.shape(y) == Shape{8, 4});
  CHECK(g.shape(g.reduce(ReduceOp::mean, y, {0})) == Shape{4});
  CHECK(g.shape(g.reduce(ReduceOp::sum, y, {-1}, true)) == Shape{8, 1});
  CHECK(g.shape(g.transpose(y, {1, 0})) == Shape{4, 8});
  CHECK(g.shape(g.add(y, g.variable("b", {4}))) == Shape{8, 4});
  auto ln = g.layer_norm(y, g.variable("gamma", {4}), g.variable("beta", {4}));
  CHECK(g.shape(ln[1]) == Shape{8});
  ValueId ids = g.input("ids", {2, 5}, DType::i64);
  CHECK(g.shape(g.embedding(g.variable("table", {100, 3}), ids)) == Shape{2, 5, 3});
  CHECK(g.dtype(g.cast(y, DType::bf16)) == DType::bf16);
  CHECK(g.variables().size() == 5);
  CHECK(g.str().find("matmul") != std::string::npos);
}

TEST_CASE("graph errors name the op and the operands") {
  Graph g;
  ValueId x = g.input("x", {8, 16});
  ValueId w = g.variable("dense/kernel", {15, 4});
  // The op table's arity holds for nodes appended directly too.
  CHECK_THROWS_WITH_AS(g.add_node(OpKind::matmul, {x}, {}, {{Shape{8, 4}, DType::f32}}),
                       "matmul takes 2 inputs, got 1", GraphError);
  try {
    g.matmul(x, w);
    FAIL("expected ShapeError");
  } catch (const ShapeError& e) {
    std::string m = e.what();
    CHECK(m.find("matmul") != std::string::npos);
    CHECK(m.find("[8, 16]") != std::string::npos);
    CHECK(m.find("[15, 4]") != std::string::npos);
  }
  ValueId ints = g.input("ids", {8, 16}, DType::i32);
  try {
    g.add(x, ints);
    FAIL("expected DTypeError");
  } catch (const DTypeError& e) {
    std::string m = e.what();
    CHECK(m.find("add") != std::string::npos);
    CHECK(m.find("f32[8, 16]") != std::string::npos);
    CHECK(m.find("i32[8, 16]") != std::string::npos);
  }
  CHECK_THROWS_AS(g.add(x, g.input("y", {3, 16})), ShapeError);
  CHECK_THROWS_AS(g.reshape(x, {7, 3}), ShapeError);
  CHECK_THROWS_AS(g.transpose(x, {0, 0}), ShapeError);
  CHECK_THROWS_AS(g.reduce(ReduceOp::sum, x, {2}), ShapeError);
  CHECK_THROWS_AS(g.add(x, 999), GraphError);
}

TEST_CASE("executor checks bindings") {
  Graph g;
  ValueId x = g.input("x", {2, 3});
  ValueId y = g.unary(UnaryOp::exp, x);
  Executor exec(g, {y});
  CHECK_THROWS_AS(exec.run(), Error);  // x is not bound
  CHECK_THROWS_AS(exec.bind(x, Tensor::empty({3, 2}, DType::f32)), ShapeError);
  CHECK_THROWS_AS(exec.bind(x, Tensor::empty({2, 3}, DType::i32)), DTypeError);
  CHECK_THROWS_AS(exec.bind(y, Tensor::empty({2, 3}, DType::f32)), GraphError);
  // One device holds the whole batch: its rows start at 0.
  CHECK_THROWS_WITH_AS(exec.bind_rows(x, Tensor::empty({2, 3}, DType::f32), 2),
                       "bind_rows: one device holds the whole batch of 'x', so its rows start at 0, not 2", ShapeError);
  Tensor xv = random_tensor({2, 3}, 1);
  exec.bind_rows(x, xv, 0);
  exec.run();
  std::vector<float> expected;
  for (float v : xv.to_vector<float>()) expected.push_back(std::exp(v));
  check_close(exec.output(y), expected);
}

TEST_CASE("a profiled run times each op once under its key and computes what an unprofiled run does") {
  Graph g;
  ValueId x = g.input("x", {64, 32});
  ValueId w = g.variable("w", {32, 16});
  ValueId y = g.reduce(ReduceOp::sum, g.unary(UnaryOp::exp, g.matmul(x, w)), {1});
  const Tensor xv = random_tensor({64, 32}, 2, -0.5f, 0.5f), wv = random_tensor({32, 16}, 3, -0.5f, 0.5f);
  Executor plain(g, {y}), profiled(g, {y});
  std::map<std::string, StepRunner::OpTime> sink;
  profiled.enable_profiling(&sink);
  for (Executor* e : {&plain, &profiled}) {
    e->bind(x, xv);
    e->bind(w, wv);
  }
  plain.run();
  profiled.run();
  profiled.run();
  check_close(profiled.output(y), plain.output(y).to_vector<float>(), 0.0, 0.0);
  for (const char* key : {"matmul f32 [64, 32] x [32, 16]", "unary exp", "reduce sum [64, 16]"}) {
    CAPTURE(key);
    REQUIRE(sink.contains(key));
    CHECK(sink[key].calls == 2);
    CHECK(sink[key].seconds >= 0.0);
  }
}

TEST_CASE("a profile names a convolution and a pooling by their operands' dtype and shapes and their output's") {
  Graph g;
  ValueId x = g.input("x", {2, 8, 8, 3});
  ValueId w = g.variable("w", {3, 3, 3, 4});
  ValueId y = g.reduce(ReduceOp::sum, g.pool2d(g.conv2d(x, w, {}), {.kind = PoolKind::max}), {0, 1, 2, 3});
  Executor profiled(g, {y});
  std::map<std::string, StepRunner::OpTime> sink;
  profiled.enable_profiling(&sink);
  profiled.bind(x, random_tensor({2, 8, 8, 3}, 4));
  profiled.bind(w, random_tensor({3, 3, 3, 4}, 5));
  profiled.run();
  for (const char* key : {"conv2d f32 [2, 8, 8, 3], [3, 3, 3, 4] -> [2, 6, 6, 4]", "pool2d max f32 [2, 6, 6, 4] -> [2, 3, 3, 4]"}) {
    CAPTURE(key);
    REQUIRE(sink.contains(key));
    CHECK(sink[key].calls == 1);
  }
}

TEST_CASE("the host op timer gives a time per start-stop pair, in order, and forgets them when read") {
  std::unique_ptr<OpTimer> timer = make_host_op_timer();
  CHECK(timer->seconds().empty());
  timer->start();  // an op that threw: no stop, no entry
  timer->start();
  timer->stop();
  timer->start();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  timer->stop();
  const std::vector<double> s = timer->seconds();
  REQUIRE(s.size() == 2);
  CHECK(s[0] >= 0.0);
  CHECK(s[1] >= 0.019);
  CHECK(timer->seconds().empty());
}

namespace {

// A two-layer classifier trained with Adam: x[16, 8] -> 32 (relu) -> 4 logits,
// mean cross-entropy against one-hot labels.
// Two dense layers with Adam; `with_updates` false leaves the update nodes
// out (the gradients are then the caller's to apply).
struct TinyTrainer {
  Graph g;
  ValueId x, labels, loss;
  std::vector<ValueId> params, grads, ms, vs;
  std::vector<std::pair<ValueId, Tensor>> bindings;

  // 30 units by default: no kernel gradient is a multiple of 16 wide, so no
  // update multiplies its gradient itself (fusion.hpp, fuse_update_products)
  // and the early updates can be compared exactly with updates last.
  explicit TinyTrainer(bool with_updates = true, std::int64_t units = 30) {
    x = g.input("x", {16, 8});
    labels = g.input("labels", {16, 4});
    ValueId w1 = g.variable("dense/kernel", {8, units}), b1 = g.variable("dense/bias", {units});
    ValueId w2 = g.variable("dense_1/kernel", {units, 4}), b2 = g.variable("dense_1/bias", {4});
    ValueId h = g.unary(UnaryOp::relu, g.add(g.matmul(x, w1), b1));
    ValueId logp = g.softmax(g.add(g.matmul(h, w2), b2), -1, /*log=*/true);
    loss = g.scale(g.reduce(ReduceOp::sum, g.mul(logp, labels), {0, 1}), -1.0 / 16);
    params = {w1, b1, w2, b2};
    auto grad_of = append_gradients(g, loss, params);
    unsigned seed = 10;
    for (ValueId p : params) {
      const Shape& s = g.shape(p);
      ValueId m = g.variable(g.value(p).name + "/m", s), v = g.variable(g.value(p).name + "/v", s);
      grads.push_back(grad_of.at(p));
      ms.push_back(m);
      vs.push_back(v);
      if (with_updates) g.adam_update(p, grad_of.at(p), m, v, {.learning_rate = 1e-2f});
      bindings.emplace_back(p, random_tensor(s, seed++, -0.3f, 0.3f));
      bindings.emplace_back(m, zeros(s));
      bindings.emplace_back(v, zeros(s));
    }
    bindings.emplace_back(x, random_tensor({16, 8}, 1));
    std::vector<float> onehot(16 * 4, 0.0f);
    for (int i = 0; i < 16; ++i) onehot[i * 4 + (i * 7) % 4] = 1.0f;
    bindings.emplace_back(labels, Tensor::from_vector(onehot, {16, 4}));
  }
};

}  // namespace

TEST_CASE("a training step allocates nothing after the first") {
  TinyTrainer t;
  Executor exec(t.g, {t.loss});
  for (auto& [id, tensor] : t.bindings) exec.bind(id, tensor);
  Allocator& alloc = allocator_for(Device::cpu(0));
  exec.run();
  float first_loss = exec.output(t.loss).to_vector<float>()[0];
  auto after_first = alloc.stats();
  for (int step = 1; step < 10; ++step) exec.run();
  auto after_ten = alloc.stats();
  CHECK(after_ten.allocations == after_first.allocations);
  CHECK(after_ten.bytes_in_use == after_first.bytes_in_use);
  float last_loss = exec.output(t.loss).to_vector<float>()[0];
  CHECK(last_loss < first_loss);  // Adam on a fixed batch must make progress
}

TEST_CASE("the memory plan shares bytes only between values that are never live together") {
  TinyTrainer t;
  MemoryPlan plan = plan_memory(t.g, {t.loss});
  CHECK(plan.arena_bytes < plan.unshared_bytes);
  std::vector<ValueId> planned;
  for (ValueId v = 0; v < t.g.value_count(); ++v)
    if (plan.offset[v] != MemoryPlan::kExternal && plan.storage_of[v] == v && plan.first_use[v] >= 0)
      planned.push_back(v);
  REQUIRE(planned.size() > 10);
  auto bytes = [&](ValueId v) {
    return static_cast<std::int64_t>(t.g.shape(v).numel() * dtype_size(t.g.dtype(v)));
  };
  for (std::size_t i = 0; i < planned.size(); ++i)
    for (std::size_t j = i + 1; j < planned.size(); ++j) {
      ValueId a = planned[i], b = planned[j];
      bool live_together = plan.first_use[a] <= plan.last_use[b] && plan.first_use[b] <= plan.last_use[a];
      bool overlap = plan.offset[a] < plan.offset[b] + bytes(b) && plan.offset[b] < plan.offset[a] + bytes(a);
      if (live_together && overlap) FAIL_CHECK("values %" << a << " and %" << b << " overlap while both live");
      CHECK(plan.offset[a] + bytes(a) <= static_cast<std::int64_t>(plan.arena_bytes));
    }
}

TEST_CASE("each update runs as soon as its gradient is final, and the step computes what updating last does") {
  TinyTrainer early;
  MemoryPlan plan = plan_memory(early.g, {early.loss});
  auto position = [&](auto is) {
    for (std::size_t i = 0; i < plan.schedule.size(); ++i)
      if (is(early.g.node(plan.schedule[i]))) return static_cast<int>(i);
    return -1;
  };
  auto update_of = [&](ValueId p) {
    return position([&](const Node& n) { return n.kind == OpKind::adam_update && n.inputs[0] == p; });
  };
  // Every read of a parameter comes before its update.
  for (ValueId p : early.params)
    for (std::size_t i = 0; i < plan.schedule.size(); ++i) {
      const Node& n = early.g.node(plan.schedule[i]);
      bool reads = std::find(n.inputs.begin(), n.inputs.end(), p) != n.inputs.end();
      if (reads && n.kind != OpKind::adam_update) CHECK(static_cast<int>(i) < update_of(p));
    }
  // The second layer's kernel is updated before the first layer's kernel
  // gradient (the last matmul of the backward pass) is computed.
  const ValueId w1 = early.params[0], w2 = early.params[2];
  const int w1_grad = position([&](const Node& n) { return n.outputs.size() == 1 && n.outputs[0] == early.grads[0]; });
  REQUIRE(w1_grad >= 0);
  CHECK(update_of(w2) < w1_grad);
  CHECK(update_of(w1) > w1_grad);

  // Three steps give exactly the parameters of three steps of gradients
  // followed by Adam on each parameter in turn.
  TinyTrainer last(/*with_updates=*/false);
  std::vector<ValueId> outputs = last.grads;
  outputs.push_back(last.loss);
  Executor grads_only(last.g, outputs);
  Executor fused(early.g, {early.loss});
  for (auto& [id, tensor] : last.bindings) grads_only.bind(id, tensor);
  for (auto& [id, tensor] : early.bindings) fused.bind(id, tensor);
  Backend& backend = backend_for(Device::cpu(0));
  for (int step = 1; step <= 3; ++step) {
    fused.run();
    grads_only.run();
    for (std::size_t i = 0; i < last.params.size(); ++i) {
      auto bound = [&](ValueId id) {
        for (auto& [leaf, tensor] : last.bindings)
          if (leaf == id) return tensor;
        FAIL("unbound value " << id);
        return Tensor();
      };
      backend.adam_update(bound(last.params[i]), grads_only.output(last.grads[i]), bound(last.ms[i]),
                          bound(last.vs[i]), {.learning_rate = 1e-2f, .step = step});
    }
    CHECK(fused.output(early.loss).to_vector<float>() == grads_only.output(last.loss).to_vector<float>());
  }
  for (std::size_t i = 0; i < early.bindings.size(); ++i)
    CHECK(early.bindings[i].second.to_vector<float>() == last.bindings[i].second.to_vector<float>());
}

TEST_CASE("a weight gradient's matmul runs inside its update where the backend takes it, with the same step") {
  // 32 units: the first kernel's gradient x^T dh is [8, 32]; the second's, [32, 4].
  TinyTrainer fused_graph(/*with_updates=*/true, 32);
  const Graph& g = fused_graph.g;
  const auto wide = [](DType, const Shape&, const Shape& b) { return b[1] % 16 == 0; };
  MemoryPlan plan = plan_memory(g, {fused_graph.loss}, {}, wide);
  auto update_of = [&](ValueId p) {
    for (NodeId n = 0; n < g.node_count(); ++n)
      if (g.node(n).kind == OpKind::adam_update && g.node(n).inputs[0] == p) return n;
    return NodeId{-1};
  };
  const NodeId update_w1 = update_of(fused_graph.params[0]), update_w2 = update_of(fused_graph.params[2]);
  REQUIRE(plan.update_products.size() == 1);
  REQUIRE(plan.update_products.contains(update_w1));
  CHECK_FALSE(plan.update_products.contains(update_w2));  // 4 wide: `wide` refuses it
  const ValueId grad_w1 = fused_graph.grads[0];
  const NodeId product = g.value(grad_w1).producer;
  const UpdateProduct& operands = plan.update_products.at(update_w1);
  CHECK(operands.a == g.node(product).inputs[0]);
  CHECK(operands.b == g.node(product).inputs[1]);
  // The matmul is gone, its gradient never written; the update reads its operands.
  CHECK(std::find(plan.schedule.begin(), plan.schedule.end(), product) == plan.schedule.end());
  CHECK(plan.offset[static_cast<std::size_t>(grad_w1)] == MemoryPlan::kExternal);
  const std::vector<ValueId> reads = plan.reads(g, update_w1);
  CHECK(std::find(reads.begin(), reads.end(), grad_w1) == reads.end());
  CHECK(std::find(reads.begin(), reads.end(), operands.a) != reads.end());
  CHECK(std::find(reads.begin(), reads.end(), operands.b) != reads.end());
  // Nothing is fused where the gradient is read elsewhere (here: an output).
  CHECK(plan_memory(g, {fused_graph.loss, grad_w1}, {}, wide).update_products.empty());

  // On the CPU (which fuses where it has AVX-512), three steps give the
  // parameters of three steps of gradients then Adam, up to the order of the
  // gradient's sums.
  TinyTrainer last(/*with_updates=*/false, 32);
  std::vector<ValueId> outputs = last.grads;
  outputs.push_back(last.loss);
  Executor grads_only(last.g, outputs);
  Executor fused(g, {fused_graph.loss});
  std::map<std::string, StepRunner::OpTime> profile;
  fused.enable_profiling(&profile);
  for (auto& [id, tensor] : last.bindings) grads_only.bind(id, tensor);
  for (auto& [id, tensor] : fused_graph.bindings) fused.bind(id, tensor);
  Backend& backend = backend_for(Device::cpu(0));
  for (int step = 1; step <= 3; ++step) {
    fused.run();
    grads_only.run();
    for (std::size_t i = 0; i < last.params.size(); ++i)
      backend.adam_update(last.bindings[3 * i].second, grads_only.output(last.grads[i]),
                          last.bindings[3 * i + 1].second, last.bindings[3 * i + 2].second,
                          {.learning_rate = 1e-2f, .step = step});
  }
  for (std::size_t i = 0; i < fused_graph.bindings.size(); ++i)
    check_close(fused_graph.bindings[i].second, last.bindings[i].second.to_vector<float>(), 1e-5, 1e-6);
  const bool by_product = std::any_of(profile.begin(), profile.end(),
                                      [](const auto& entry) { return entry.first == "adam_update by product [16, 8]^T x [16, 32]"; });
  CHECK(by_product == backend.supports_update_by_product(DType::f32, {16, 8}, {16, 32}));
}

TEST_CASE("a convolution's bias gradient is summed by its weight gradient's call where the backend says it pays") {
  // loss = sum((conv(x, w) + b) * t): the gradient of the convolution's output is t.
  Graph g;
  const Shape x_shape{2, 7, 6, 3}, t_shape{2, 5, 4, 16}, w_shape{3, 3, 3, 16};
  ValueId x = g.input("x", x_shape), t = g.input("t", t_shape);
  ValueId w = g.variable("conv/kernel", w_shape), b = g.variable("conv/bias", {16});
  ValueId velocity = g.variable("conv/bias/velocity", {16});
  ValueId loss = g.reduce(ReduceOp::sum, g.mul(g.add(g.conv2d(x, w, {}), b), t), {0, 1, 2, 3}, false);
  const auto grads = append_gradients(g, loss, {w, b});
  const ValueId grad_w = grads.at(w);
  g.sgd_update(b, grads.at(b), velocity, {.learning_rate = 0.5f});  // runs early: right after its gradient

  NodeId weight_gradient = -1;
  for (NodeId n = 0; n < g.node_count(); ++n)
    if (g.node(n).kind == OpKind::conv2d_grad_weight) weight_gradient = n;
  REQUIRE(weight_gradient >= 0);
  const ValueId dy = g.node(weight_gradient).inputs[1];
  const std::vector<ValueId> outputs{loss, grad_w};
  const auto pays = [](DType, const Shape&, const Shape&, const Shape&) { return true; };
  MemoryPlan plan = plan_memory(g, outputs, {}, {}, pays);
  REQUIRE(plan.conv_bias_gradients.size() == 1);
  REQUIRE(plan.conv_bias_gradients.contains(weight_gradient));
  const ValueId bias_sum = plan.conv_bias_gradients.at(weight_gradient);
  CHECK(g.shape(bias_sum) == Shape{1, 1, 1, 16});
  // The sum of dy is gone; the weight gradient writes it, before anything reads it (the update).
  const auto at = [&](NodeId n) { return std::find(plan.schedule.begin(), plan.schedule.end(), n) - plan.schedule.begin(); };
  for (NodeId n : plan.schedule) CHECK_FALSE((g.node(n).kind == OpKind::reduce && g.node(n).inputs[0] == dy));
  const std::vector<ValueId> writes = plan.writes(g, weight_gradient);
  CHECK(std::find(writes.begin(), writes.end(), bias_sum) != writes.end());
  for (NodeId n : plan.schedule)
    for (ValueId in : plan.reads(g, n))
      if (plan.storage_of[in] == bias_sum) CHECK(at(n) > at(weight_gradient));
  // Not where the backend says no.
  CHECK(plan_memory(g, outputs).conv_bias_gradients.empty());

  // On the CPU: the weight gradient and the updated bias as the separate calls give them.
  Backend& be = backend_for(Device::cpu(0));
  Tensor xs = random_tensor(x_shape, 61), ts = random_tensor(t_shape, 62), ws = random_tensor(w_shape, 63),
         bs = random_tensor({16}, 64), vs = zeros({16});
  const std::vector<float> b_before = bs.to_vector<float>();
  Executor exec(g, outputs);
  std::map<std::string, StepRunner::OpTime> profile;
  exec.enable_profiling(&profile);
  for (auto [leaf, tensor] : {std::pair{x, xs}, {t, ts}, {w, ws}, {b, bs}, {velocity, vs}}) exec.bind(leaf, tensor);
  exec.run();
  Tensor dw = zeros(w_shape);
  be.conv2d_backward_weights(xs, ts, dw, nullptr, {});
  check_close(exec.output(grad_w), dw.to_vector<float>(), 1e-4, 1e-5);
  const std::vector<float> tv = ts.to_vector<float>();
  std::vector<float> b_want = b_before;
  for (int f = 0; f < 16; ++f) {
    double sum = 0;
    for (std::size_t i = static_cast<std::size_t>(f); i < tv.size(); i += 16) sum += tv[i];
    b_want[static_cast<std::size_t>(f)] -= 0.5f * static_cast<float>(sum);
  }
  check_close(bs, b_want, 1e-4, 1e-5);
  const bool fused = std::any_of(profile.begin(), profile.end(), [](const auto& entry) {
    return entry.first.starts_with("conv2d_grad_weight") && entry.first.ends_with(" and bias");
  });
  CHECK(fused == be.computes_conv_bias_gradient(DType::f32, x_shape, t_shape, w_shape));
}

TEST_CASE("a first convolution's weight gradient reads through the ReLU after it, where the backend takes it") {
  // loss = sum(relu(conv2(relu(conv1(x) + b1)) + b2) * t): conv1's ReLU
  // gradient is read by its weight and bias gradients only (x is an input),
  // conv2's also by conv2's input gradient.
  Graph g;
  const Shape x_shape{2, 9, 9, 1}, w1_shape{3, 3, 1, 16}, w2_shape{3, 3, 16, 16}, t_shape{2, 5, 5, 16};
  ValueId x = g.input("x", x_shape), t = g.input("t", t_shape);
  ValueId w1 = g.variable("conv1/kernel", w1_shape), b1 = g.variable("conv1/bias", {16});
  ValueId w2 = g.variable("conv2/kernel", w2_shape), b2 = g.variable("conv2/bias", {16});
  ValueId a1 = g.unary(UnaryOp::relu, g.add(g.conv2d(x, w1, {}), b1));
  ValueId a2 = g.unary(UnaryOp::relu, g.add(g.conv2d(a1, w2, {}), b2));
  ValueId loss = g.reduce(ReduceOp::sum, g.mul(a2, t), {0, 1, 2, 3}, false);
  const auto grads = append_gradients(g, loss, {w1, b1, w2, b2});
  NodeId first_weight_gradient = -1, relu_gradient = -1;
  for (NodeId n = 0; n < g.node_count(); ++n)
    if (g.node(n).kind == OpKind::conv2d_grad_weight && g.node(n).inputs[0] == x) first_weight_gradient = n;
  REQUIRE(first_weight_gradient >= 0);
  const ValueId dz1 = g.node(first_weight_gradient).inputs[1];
  relu_gradient = g.value(dz1).producer;
  REQUIRE(g.node(relu_gradient).kind == OpKind::unary_grad);
  const std::vector<ValueId> outputs{loss, grads.at(w1), grads.at(b1), grads.at(w2), grads.at(b2)};
  const auto yes = [](DType, const Shape&, const Shape&, const Shape&) { return true; };
  const auto takes = [](DType, const Shape&) { return true; };
  MemoryPlan plan = plan_memory(g, outputs, {}, {}, yes, takes);
  REQUIRE(plan.conv_relu_gradients.size() == 1);
  REQUIRE(plan.conv_relu_gradients.contains(first_weight_gradient));
  const ConvReluGradient& through = plan.conv_relu_gradients.at(first_weight_gradient);
  CHECK(through.relu_output == a1);
  CHECK(through.dy == g.node(relu_gradient).inputs[1]);
  CHECK(std::find(plan.schedule.begin(), plan.schedule.end(), relu_gradient) == plan.schedule.end());
  const std::vector<ValueId> reads = plan.reads(g, first_weight_gradient);
  CHECK(std::find(reads.begin(), reads.end(), a1) != reads.end());
  CHECK(std::find(reads.begin(), reads.end(), dz1) == reads.end());
  // a1 lives until the weight gradient has read it.
  const auto at = [&](NodeId n) { return std::find(plan.schedule.begin(), plan.schedule.end(), n) - plan.schedule.begin(); };
  CHECK(plan.last_use[plan.storage_of[a1]] >= at(first_weight_gradient));
  // Not where the backend says no, nor where the ReLU's gradient is an output.
  CHECK(plan_memory(g, outputs, {}, {}, yes).conv_relu_gradients.empty());
  std::vector<ValueId> with_dz1 = outputs;
  with_dz1.push_back(dz1);
  CHECK(plan_memory(g, with_dz1, {}, {}, yes, takes).conv_relu_gradients.empty());

  // On the CPU: the same gradients as the plan that keeps the ReLU's gradient (dz1 an output).
  Backend& be = backend_for(Device::cpu(0));
  std::map<ValueId, Tensor> bound{{x, random_tensor(x_shape, 81)},   {t, random_tensor(t_shape, 82)},
                                  {w1, random_tensor(w1_shape, 83)}, {b1, random_tensor({16}, 84, -0.2f, 0.2f)},
                                  {w2, random_tensor(w2_shape, 85)}, {b2, random_tensor({16}, 86)}};
  Executor fused(g, outputs), kept(g, with_dz1);
  std::map<std::string, StepRunner::OpTime> fused_profile, kept_profile;
  fused.enable_profiling(&fused_profile);
  kept.enable_profiling(&kept_profile);
  for (auto& [leaf, tensor] : bound) {
    fused.bind(leaf, tensor);
    kept.bind(leaf, tensor);
  }
  fused.run();
  kept.run();
  for (ValueId v : outputs) check_close(fused.output(v), kept.output(v).to_vector<float>(), 1e-5, 1e-6);
  const auto through_relu = [](const auto& profile) {
    return std::any_of(profile.begin(), profile.end(),
                       [](const auto& entry) { return entry.first.ends_with(" through relu"); });
  };
  CHECK(through_relu(fused_profile) == be.takes_conv_weight_gradient_through_relu(DType::f32, w1_shape));
  CHECK_FALSE(through_relu(kept_profile));
}

TEST_CASE("a first convolution's weight gradient through its ReLU, moved by its fused bias gradient, updates as unfused") {
  // sgd on every variable: the bias's update runs right after its gradient,
  // so the weight gradient that sums it moves to the sum's place.
  Graph g;
  const Shape x_shape{2, 9, 9, 1}, w_shape{3, 3, 1, 16}, t_shape{2, 7, 7, 16};
  ValueId x = g.input("x", x_shape), t = g.input("t", t_shape);
  ValueId w = g.variable("conv/kernel", w_shape), b = g.variable("conv/bias", {16});
  ValueId vw = g.variable("conv/kernel/velocity", w_shape), vb = g.variable("conv/bias/velocity", {16});
  ValueId a = g.unary(UnaryOp::relu, g.add(g.conv2d(x, w, {}), b));
  ValueId loss = g.reduce(ReduceOp::sum, g.mul(a, t), {0, 1, 2, 3}, false);
  const auto grads = append_gradients(g, loss, {w, b});
  g.sgd_update(w, grads.at(w), vw, {.learning_rate = 0.1f, .momentum = 0.9f});
  g.sgd_update(b, grads.at(b), vb, {.learning_rate = 0.1f, .momentum = 0.9f});
  NodeId weight_gradient = -1;
  for (NodeId n = 0; n < g.node_count(); ++n)
    if (g.node(n).kind == OpKind::conv2d_grad_weight) weight_gradient = n;
  const ValueId dz = g.node(weight_gradient).inputs[1];
  const auto yes = [](DType, const Shape&, const Shape&, const Shape&) { return true; };
  const auto takes = [](DType, const Shape&) { return true; };
  MemoryPlan plan = plan_memory(g, {loss}, {}, {}, yes, takes);
  CHECK(plan.conv_bias_gradients.contains(weight_gradient));
  CHECK(plan.conv_relu_gradients.contains(weight_gradient));

  // Two steps on the CPU, against the plan that keeps the ReLU's gradient
  // (an output): the same variables after them.
  const std::map<ValueId, std::pair<Shape, unsigned>> leaves{
      {x, {x_shape, 91}}, {t, {t_shape, 92}}, {w, {w_shape, 93}}, {b, {{16}, 94}}, {vw, {w_shape, 95}}, {vb, {{16}, 96}}};
  auto bind_all = [&](Executor& exec) {
    std::map<ValueId, Tensor> bound;
    for (const auto& [leaf, spec] : leaves) exec.bind(leaf, bound[leaf] = random_tensor(spec.first, spec.second));
    return bound;
  };
  Executor fused(g, {loss}), kept(g, {loss, dz});
  std::map<ValueId, Tensor> fused_vars = bind_all(fused), kept_vars = bind_all(kept);
  for (int step = 0; step < 2; ++step) {
    fused.run();
    kept.run();
  }
  for (ValueId v : {w, b, vw, vb}) check_close(fused_vars.at(v), kept_vars.at(v).to_vector<float>(), 1e-5, 1e-6);
  CHECK(fused_vars.at(w).to_vector<float>() != random_tensor(w_shape, 93).to_vector<float>());  // it trained
}

TEST_CASE("a ReLU's gradient taken by a max pool's gradient is not also taken by the weight gradient") {
  // conv -> relu -> max pool: the pool's gradient takes the ReLU's (its
  // epilogue), so the weight gradient reads its output, and nothing else.
  Graph g;
  ValueId x = g.input("x", {2, 8, 8, 1}), t = g.input("t", {2, 3, 3, 16});
  ValueId w = g.variable("conv/kernel", {3, 3, 1, 16});
  ValueId pooled = g.pool2d(g.unary(UnaryOp::relu, g.conv2d(x, w, {})), {});
  ValueId loss = g.reduce(ReduceOp::sum, g.mul(pooled, t), {0, 1, 2, 3}, false);
  const auto grads = append_gradients(g, loss, {w});
  const auto yes = [](DType, const Shape&, const Shape&, const Shape&) { return true; };
  const auto takes = [](DType, const Shape&) { return true; };
  MemoryPlan plan = plan_memory(g, {loss, grads.at(w)}, {}, {}, yes, takes);
  CHECK(plan.conv_relu_gradients.empty());
  const bool pool_takes_relu = std::any_of(plan.epilogues.begin(), plan.epilogues.end(), [&](const auto& e) {
    return g.node(e.first).kind == OpKind::pool2d_grad && e.second.activation == Activation::relu;
  });
  CHECK(pool_takes_relu);
}

TEST_CASE("a bias add and activation after a matmul or convolution run as its epilogue, with the same result") {
  Graph g;
  ValueId x = g.input("x", {2, 6, 6, 3});
  ValueId w = g.variable("conv/kernel", {3, 3, 3, 4}), cb = g.variable("conv/bias", {4});
  ValueId k = g.variable("dense/kernel", {64, 5}), b = g.variable("dense/bias", {5});
  ValueId conv = g.unary(UnaryOp::relu, g.add(g.conv2d(x, w, {}), cb));
  ValueId pre = g.add(g.matmul(g.reshape(conv, {2, 64}), k), b);
  ValueId y = g.unary(UnaryOp::gelu_erf, pre);
  std::map<ValueId, Tensor> bound{{x, random_tensor({2, 6, 6, 3}, 1)}, {w, random_tensor({3, 3, 3, 4}, 2)},
                                  {cb, random_tensor({4}, 3)}, {k, random_tensor({64, 5}, 4)},
                                  {b, random_tensor({5}, 5)}};

  MemoryPlan plan = plan_memory(g, {y});
  CHECK(plan.epilogues.size() == 2);
  for (NodeId n : plan.schedule) {
    CHECK(g.node(n).kind != OpKind::binary);
    CHECK(g.node(n).kind != OpKind::unary);
  }
  Executor exec(g, {y});
  for (auto& [id, t] : bound) exec.bind(id, t);
  exec.run();

  // The same ops one by one on the backend.
  Backend& be = backend_for(Device::cpu(0));
  Tensor c = zeros({2, 4, 4, 4}), cbias = zeros({2, 4, 4, 4}), p = zeros({2, 5}), pb = zeros({2, 5}), want = zeros({2, 5});
  be.conv2d_forward(bound[x], bound[w], nullptr, c, {});
  be.binary(BinaryOp::add, c, bound[cb], c);
  be.unary(UnaryOp::relu, c, cbias);
  be.matmul(cbias.reshape({2, 64}), bound[k], nullptr, p, {});
  be.binary(BinaryOp::add, p, bound[b], pb);
  be.unary(UnaryOp::gelu_erf, pb, want);
  check_close(exec.output(y), want.to_vector<float>(), 1e-5, 1e-5);

  // A graph's conv2d takes no activation of its own: the fusion adds it.
  CHECK_THROWS_AS(g.conv2d(x, w, {.activation = Activation::relu}), GraphError);

  // An activation right after a convolution without a bias fuses alone.
  Graph h;
  ValueId hx = h.input("x", {2, 6, 6, 3}), hw = h.variable("conv/kernel", {3, 3, 3, 4});
  ValueId hy = h.unary(UnaryOp::tanh, h.conv2d(hx, hw, {}));
  MemoryPlan alone = plan_memory(h, {hy});
  REQUIRE(alone.epilogues.size() == 1);
  CHECK(alone.epilogues.begin()->second.bias == -1);
  CHECK(alone.epilogues.begin()->second.activation == Activation::tanh);
  Executor fused_alone(h, {hy});
  fused_alone.bind(hx, bound[x]);
  fused_alone.bind(hw, bound[w]);
  fused_alone.run();
  Tensor raw = zeros({2, 4, 4, 4}), activated = zeros({2, 4, 4, 4});
  be.conv2d_forward(bound[x], bound[w], nullptr, raw, {});
  be.unary(UnaryOp::tanh, raw, activated);
  check_close(fused_alone.output(hy), activated.to_vector<float>(), 1e-5, 1e-5);

  // A pre-activation that is also an output stays a value of its own.
  MemoryPlan kept = plan_memory(g, {y, pre});
  REQUIRE(kept.epilogues.size() == 2);
  for (const auto& [n, e] : kept.epilogues)
    if (g.node(n).kind == OpKind::matmul) CHECK(e.out == pre);

  // A bias that is a view of a variable, made after the matmul (attention's
  // [H, K] bias as [H * K]), fuses too: the view runs with the leaves.
  Graph r;
  ValueId rx = r.input("x", {3, 4}), rk = r.variable("q/kernel", {4, 6});
  ValueId rproduct = r.matmul(rx, rk);
  ValueId rb = r.variable("q/bias", {2, 3});
  ValueId ry = r.add(rproduct, r.reshape(rb, {6}));
  MemoryPlan viewed = plan_memory(r, {ry});
  REQUIRE(viewed.epilogues.size() == 1);
  for (NodeId n : viewed.schedule) CHECK(r.node(n).kind != OpKind::binary);
  Executor fused_view(r, {ry});
  Tensor tx = random_tensor({3, 4}, 6), tk = random_tensor({4, 6}, 7), tb = random_tensor({2, 3}, 8);
  fused_view.bind(rx, tx);
  fused_view.bind(rk, tk);
  fused_view.bind(rb, tb);
  fused_view.run();
  Tensor product = zeros({3, 6}), biased = zeros({3, 6});
  be.matmul(tx, tk, nullptr, product, {});
  be.binary(BinaryOp::add, product, tb.reshape({6}), biased);
  check_close(fused_view.output(ry), biased.to_vector<float>(), 1e-6, 1e-6);

  // Not where an update runs between the matmul and the add: the fused call
  // would read the bias before the update that the add reads it after.
  Graph u;
  ValueId ux = u.input("x", {3, 4}), uk = u.variable("kernel", {4, 6});
  ValueId uproduct = u.matmul(ux, uk);
  ValueId state = u.variable("state", {2, 3});
  const NodeId update = u.moving_average(state, u.unary(UnaryOp::tanh, u.input("z", {2, 3})), 0.5f);
  ValueId uy = u.add(uproduct, u.reshape(state, {6}));
  MemoryPlan updated = plan_memory(u, {uy});
  auto at = [&](NodeId n) { return std::find(updated.schedule.begin(), updated.schedule.end(), n) - updated.schedule.begin(); };
  REQUIRE(at(u.value(uproduct).producer) < at(update));  // the case: the update between the two
  CHECK(updated.epilogues.empty());
}

TEST_CASE("mixed precision: a layer norm or GELU writes its matmul operand in bf16 itself, bit for bit as the cast") {
  Graph g;
  g.set_matmul_dtype(DType::bf16);
  ValueId x = g.input("x", {8, 16});
  ValueId gamma = g.variable("ln/gamma", {16}), beta = g.variable("ln/beta", {16});
  ValueId w1 = g.variable("fc1/kernel", {16, 32}), b1 = g.variable("fc1/bias", {32});
  ValueId w2 = g.variable("fc2/kernel", {32, 4});
  ValueId ln = g.layer_norm(x, gamma, beta)[0];
  ValueId pre = g.add(g.matmul(ln, w1), b1);
  ValueId act = g.unary(UnaryOp::gelu_erf, pre);
  ValueId y = g.matmul(act, w2);
  // pre is an output, so the GELU is an op of its own (not the matmul's
  // epilogue), as in training where its gradient reads pre.
  const std::vector<ValueId> outputs{y, pre};
  MemoryPlan plan = plan_memory(g, outputs);
  const NodeId ln_node = g.value(ln).producer, act_node = g.value(act).producer;
  REQUIRE(plan.epilogues.contains(ln_node));
  REQUIRE(plan.epilogues.contains(act_node));
  CHECK(g.dtype(plan.epilogues.at(ln_node).out) == DType::bf16);
  CHECK(g.dtype(plan.epilogues.at(act_node).out) == DType::bf16);
  for (NodeId n : plan.schedule) {
    const Node& node = g.node(n);
    if (node.kind == OpKind::cast) CHECK((node.inputs[0] != ln && node.inputs[0] != act));
  }
  // The f32 values are never written: they take no bytes of the arena.
  CHECK(plan.offset[static_cast<std::size_t>(ln)] == MemoryPlan::kExternal);
  CHECK(plan.offset[static_cast<std::size_t>(act)] == MemoryPlan::kExternal);

  // Where the f32 values are read elsewhere (here: outputs), the casts stay.
  const std::vector<ValueId> unfused_outputs{y, pre, ln, act};
  MemoryPlan unfused_plan = plan_memory(g, unfused_outputs);
  CHECK_FALSE(unfused_plan.epilogues.contains(ln_node));
  CHECK_FALSE(unfused_plan.epilogues.contains(act_node));
  CHECK(unfused_plan.offset[static_cast<std::size_t>(act)] != MemoryPlan::kExternal);

  std::map<ValueId, Tensor> bound{{x, random_tensor({8, 16}, 1, -2.0f, 2.0f)}, {gamma, random_tensor({16}, 2, 0.5f, 1.5f)},
                                  {beta, random_tensor({16}, 3)}, {w1, random_tensor({16, 32}, 4)},
                                  {b1, random_tensor({32}, 5)}, {w2, random_tensor({32, 4}, 6)}};
  Executor fused(g, outputs), unfused(g, unfused_outputs);
  for (auto& [id, t] : bound) {
    fused.bind(id, t);
    unfused.bind(id, t);
  }
  fused.run();
  unfused.run();
  check_close(fused.output(y), unfused.output(y).to_vector<float>(), 0.0, 0.0);
  check_close(fused.output(pre), unfused.output(pre).to_vector<float>(), 0.0, 0.0);
}

TEST_CASE("a step whose workspace does not fit is an OutOfMemoryError naming the workspace and its bytes") {
  Graph g;
  ValueId x = g.input("x", {1});
  ValueId huge = g.broadcast_to(x, {std::int64_t{1} << 44});  // 64 TiB of f32
  ValueId y = g.reduce(ReduceOp::sum, huge, {0});
  Executor exec(g, {y});
  exec.bind(x, Tensor::from_vector<float>({1.0f}, {1}));
  CHECK_THROWS_WITH_AS(exec.run(), doctest::Contains("the step's workspace (70368744177"), OutOfMemoryError);
  CHECK_THROWS_WITH_AS(exec.run(), doctest::Contains("out of memory on cpu:0"), OutOfMemoryError);
  // Refused before the C library is asked (which, under AddressSanitizer's
  // defaults, aborts instead of returning null).
  CHECK_THROWS_WITH_AS(exec.run(), doctest::Contains("of RAM and swap in all"), OutOfMemoryError);
}

TEST_CASE("fixed variables: matmuls against kept copies of their weights compute what the weights give") {
  Graph g;
  ValueId x = g.input("x", {128, 784});
  ValueId w1 = g.variable("hidden/kernel", {784, 1024}), b1 = g.variable("hidden/bias", {1024});
  ValueId w2 = g.variable("out/kernel", {1024, 1024});
  ValueId h = g.unary(UnaryOp::relu, g.add(g.matmul(x, w1), b1));
  ValueId y = g.matmul(h, w2, {.alpha = 0.5f});
  std::map<ValueId, Tensor> bound{{x, random_tensor({128, 784}, 1)}, {w1, random_tensor({784, 1024}, 2)},
                                  {b1, random_tensor({1024}, 3)}, {w2, random_tensor({1024, 1024}, 4)}};
  auto kept = std::make_shared<KeptCopies>();
  Executor plain(g, {y}), fixed(g, {y}), also_fixed(g, {y});
  fixed.fix_variables(kept);
  also_fixed.fix_variables(kept);
  for (auto& [id, t] : bound) {
    plain.bind(id, t);
    fixed.bind(id, t);
    also_fixed.bind(id, t);
  }
  // The two ways may sum k in different orders (the kept copy goes to
  // oneDNN, the plain weight perhaps to the backend's own GEMM): f32 sums of
  // 1024 terms then differ by a few ulps of the outputs' scale.
  auto check_same = [&](Executor& e) {
    plain.run();
    e.run();
    const std::vector<float> expected = plain.output(y).to_vector<float>();
    float scale = 0.0f;
    for (float v : expected) scale = std::max(scale, std::abs(v));
    check_close(e.output(y), expected, 1e-4, 1e-6 * scale);
  };
  check_same(fixed);
  check_same(also_fixed);
  // The backend says which weights it wants transposed (oneDNN's AVX2 sgemm:
  // both of these) or packed (its AVX-512 brgemm: both). Two executors over
  // the same weights share the copies.
  Backend& be = backend_for(Device::cpu(0));
  auto kept_bytes = [&](const Shape& a, const Shape& b, const MatmulArgs& args) -> std::size_t {
    switch (be.constant_b_form(a, b, DType::f32, args)) {
      case ConstantB::transposed: return static_cast<std::size_t>(b.numel()) * 4;
      case ConstantB::packed: return static_cast<std::size_t>(be.packed_b_floats(b[0], b[1])) * 4;
      case ConstantB::as_is: break;
    }
    return 0;
  };
  const std::size_t expected = kept_bytes({128, 784}, {784, 1024}, {}) + kept_bytes({128, 1024}, {1024, 1024}, {.alpha = 0.5f});
  CHECK(kept->bytes() == expected);
  if (expected == 0) MESSAGE("this CPU's backend keeps no transposed or packed weights: only the results were compared");

  // New values in place: unannounced, a run keeps the copies it has (the
  // promise broken on purpose, to see that nothing is copied per run);
  // announced, the copies follow.
  const Tensor fresh = random_tensor({1024, 1024}, 5);
  std::memcpy(bound[w2].raw_data(), fresh.raw_data(), fresh.nbytes());
  if (expected > 0) {
    plain.run();
    fixed.run();
    CHECK(fixed.output(y).to_vector<float>() != plain.output(y).to_vector<float>());
  }
  kept->changed();
  CHECK(kept->bytes() == 0);
  check_same(fixed);
  check_same(also_fixed);
  CHECK(kept->bytes() == expected);
  // Another tensor bound: the copies follow too.
  bound[w1] = random_tensor({784, 1024}, 6);
  plain.bind(w1, bound[w1]);
  fixed.bind(w1, bound[w1]);
  check_same(fixed);

  // A weight the graph itself updates is never copied.
  Graph t;
  ValueId tx = t.input("x", {128, 784}), tw = t.variable("kernel", {784, 1024});
  ValueId velocity = t.variable("kernel/velocity", {784, 1024});
  ValueId ty = t.matmul(tx, tw);
  ValueId loss = t.reduce(ReduceOp::sum, ty, {0, 1});
  ValueId grad = append_gradients(t, loss, {tw}).at(tw);
  t.sgd_update(tw, grad, velocity, {.learning_rate = 0.01f});
  auto own = std::make_shared<KeptCopies>();
  Executor updating(t, {loss});
  updating.fix_variables(own);
  updating.bind(tx, bound[x]);
  updating.bind(tw, random_tensor({784, 1024}, 7));
  updating.bind(velocity, zeros({784, 1024}));
  updating.run();
  CHECK(own->bytes() == 0);
}
