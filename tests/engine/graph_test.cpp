// Graph building (shape and dtype inference, errors), memory planning and
// the executor's allocation behaviour.
#include <doctest/doctest.h>

#include <cmath>

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
  Tensor xv = random_tensor({2, 3}, 1);
  exec.bind(x, xv);
  exec.run();
  std::vector<float> expected;
  for (float v : xv.to_vector<float>()) expected.push_back(std::exp(v));
  check_close(exec.output(y), expected);
}

namespace {

// A two-layer classifier trained with Adam: x[16, 8] -> 32 (relu) -> 4 logits,
// mean cross-entropy against one-hot labels.
struct TinyTrainer {
  Graph g;
  ValueId x, labels, loss;
  std::vector<std::pair<ValueId, Tensor>> bindings;

  TinyTrainer() {
    x = g.input("x", {16, 8});
    labels = g.input("labels", {16, 4});
    ValueId w1 = g.variable("dense/kernel", {8, 32}), b1 = g.variable("dense/bias", {32});
    ValueId w2 = g.variable("dense_1/kernel", {32, 4}), b2 = g.variable("dense_1/bias", {4});
    ValueId h = g.unary(UnaryOp::relu, g.add(g.matmul(x, w1), b1));
    ValueId logp = g.softmax(g.add(g.matmul(h, w2), b2), -1, /*log=*/true);
    loss = g.scale(g.reduce(ReduceOp::sum, g.mul(logp, labels), {0, 1}), -1.0 / 16);
    std::vector<ValueId> params{w1, b1, w2, b2};
    auto grads = append_gradients(g, loss, params);
    unsigned seed = 10;
    for (ValueId p : params) {
      const Shape& s = g.shape(p);
      ValueId m = g.variable(g.value(p).name + "/m", s), v = g.variable(g.value(p).name + "/v", s);
      g.adam_update(p, grads.at(p), m, v, {.learning_rate = 1e-2f});
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

TEST_CASE("a step whose workspace does not fit is an OutOfMemoryError naming the workspace and its bytes") {
  Graph g;
  ValueId x = g.input("x", {1});
  ValueId huge = g.broadcast_to(x, {std::int64_t{1} << 44});  // 64 TiB of f32
  ValueId y = g.reduce(ReduceOp::sum, huge, {0});
  Executor exec(g, {y});
  exec.bind(x, Tensor::from_vector<float>({1.0f}, {1}));
  CHECK_THROWS_WITH_AS(exec.run(), doctest::Contains("the step's workspace (70368744177"), OutOfMemoryError);
  CHECK_THROWS_WITH_AS(exec.run(), doctest::Contains("out of memory on cpu:0"), OutOfMemoryError);
}
