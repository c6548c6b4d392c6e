// Every differentiable op's gradient against central finite differences
// (tests/grad_check.hpp states the step and tolerance).
#include <doctest/doctest.h>

#include "tests/grad_check.hpp"

using namespace tessera;
using namespace tessera::test;

TEST_CASE("gradient: matmul in all four transpose cases, with alpha") {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      CAPTURE(ta);
      CAPTURE(tb);
      Graph g;
      Shape as = ta ? Shape{4, 3} : Shape{3, 4}, bs = tb ? Shape{5, 4} : Shape{4, 5};
      ValueId a = g.variable("a", as), b = g.variable("b", bs);
      ValueId y = g.matmul(a, b, {.transpose_a = ta, .transpose_b = tb, .alpha = 0.5f});
      check_gradients(g, y, {{a, random_tensor(as, 1)}, {b, random_tensor(bs, 2)}});
    }
}

TEST_CASE("gradient: batched matmul with a broadcast rank-2 weight") {
  for (bool tb : {false, true}) {
    CAPTURE(tb);
    Graph g;
    Shape bs = tb ? Shape{5, 4} : Shape{4, 5};
    ValueId a = g.variable("a", {2, 3, 4}), b = g.variable("b", bs);
    ValueId y = g.matmul(a, b, {.transpose_b = tb});
    check_gradients(g, y, {{a, random_tensor({2, 3, 4}, 3)}, {b, random_tensor(bs, 4)}});
  }
}

TEST_CASE("gradient: batched matmul of two rank-3 operands (attention scores)") {
  Graph g;
  ValueId q = g.variable("q", {2, 3, 4}), k = g.variable("k", {2, 5, 4});
  ValueId s = g.matmul(q, k, {.transpose_b = true, .alpha = 0.5f});
  check_gradients(g, s, {{q, random_tensor({2, 3, 4}, 5)}, {k, random_tensor({2, 5, 4}, 6)}});
}

TEST_CASE("gradient: binary ops with broadcasting on either side") {
  for (BinaryOp op : {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div, BinaryOp::max,
                      BinaryOp::min}) {
    CAPTURE(name(op));
    Graph g;
    ValueId a = g.variable("a", {3, 1, 4}), b = g.variable("b", {5, 1});
    ValueId y = g.binary(op, a, b);
    Tensor av = random_tensor({3, 1, 4}, 7), bv = random_tensor({5, 1}, 8);
    if (op == BinaryOp::div) bv = random_tensor({5, 1}, 8, 0.5f, 1.5f);
    if (op == BinaryOp::max || op == BinaryOp::min) {
      // Keep |a - b| > 2h everywhere: a in ±[0.3, 1], b in [-0.2, 0.2].
      av = away_from_zero(random_tensor({3, 1, 4}, 7, -0.7f, 0.7f), 0.3f);
      bv = random_tensor({5, 1}, 8, -0.2f, 0.2f);
    }
    check_gradients(g, y, {{a, av}, {b, bv}});
  }
}

TEST_CASE("gradient: the same value used twice accumulates") {
  Graph g;
  ValueId x = g.variable("x", {6});
  ValueId y = g.mul(x, g.unary(UnaryOp::tanh, x));
  check_gradients(g, y, {{x, random_tensor({6}, 9)}});
}

TEST_CASE("gradient: unary ops") {
  for (UnaryOp op : {UnaryOp::neg, UnaryOp::abs, UnaryOp::relu, UnaryOp::gelu_tanh,
                     UnaryOp::gelu_erf, UnaryOp::tanh, UnaryOp::sigmoid, UnaryOp::exp,
                     UnaryOp::log, UnaryOp::sqrt, UnaryOp::rsqrt, UnaryOp::square,
                     UnaryOp::reciprocal}) {
    CAPTURE(name(op));
    Graph g;
    ValueId x = g.variable("x", {2, 5});
    bool positive = op == UnaryOp::log || op == UnaryOp::sqrt || op == UnaryOp::rsqrt ||
                    op == UnaryOp::reciprocal;
    Tensor xv = positive ? random_tensor({2, 5}, 10, 0.5f, 2.0f) : away_from_zero(random_tensor({2, 5}, 10));
    check_gradients(g, g.unary(op, x), {{x, xv}});
  }
}

TEST_CASE("gradient: sum, mean and max reductions, with and without keepdims") {
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max})
    for (bool keep : {false, true}) {
      CAPTURE(name(op));
      CAPTURE(keep);
      Graph g;
      ValueId x = g.variable("x", {3, 4, 2});
      // Distinct values 0.05 apart keep each maximum where it is under ±h.
      std::vector<float> values(24);
      for (std::size_t i = 0; i < values.size(); ++i) values[i] = 0.05f * static_cast<float>((i * 7) % 24);
      check_gradients(g, g.reduce(op, x, {0, 2}, keep), {{x, Tensor::from_vector(values, {3, 4, 2})}});
    }
}

TEST_CASE("reduce max shares the gradient equally between tied maxima") {
  Graph g;
  ValueId x = g.variable("x", {2, 3});
  ValueId loss = g.reduce(ReduceOp::sum, g.reduce(ReduceOp::max, x, {1}), {0});
  auto grads = append_gradients(g, loss, {x});
  Executor exec(g, {grads.at(x)});
  exec.bind(x, Tensor::from_vector<float>({1, 3, 3, 5, 2, 1}, {2, 3}));
  exec.run();
  check_close(exec.output(grads.at(x)), {0, 0.5f, 0.5f, 1, 0, 0});
}

TEST_CASE("gradient: broadcast_to, reshape and transpose") {
  Graph g;
  ValueId x = g.variable("x", {3, 1});
  ValueId y = g.broadcast_to(x, {2, 3, 4});
  ValueId z = g.transpose(g.reshape(y, {6, 4}), {1, 0});
  check_gradients(g, z, {{x, random_tensor({3, 1}, 12)}});
}

TEST_CASE("gradient: softmax and log-softmax over the last and a middle axis") {
  for (bool log : {false, true})
    for (int axis : {-1, 1}) {
      CAPTURE(log);
      CAPTURE(axis);
      Graph g;
      ValueId x = g.variable("x", {2, 3, 4});
      check_gradients(g, g.softmax(x, axis, log), {{x, random_tensor({2, 3, 4}, 13, -2.0f, 2.0f)}});
    }
}

TEST_CASE("gradient: causal softmax, square and with fewer queries than keys") {
  for (const Shape& shape : {Shape{2, 4, 4}, Shape{2, 3, 5}}) {
    CAPTURE(shape.str());
    Graph g;
    ValueId x = g.variable("x", shape);
    check_gradients(g, g.causal_softmax(x), {{x, random_tensor(shape, 14, -2.0f, 2.0f)}});
  }
  Graph g;
  CHECK_THROWS_WITH_AS(g.causal_softmax(g.variable("x", {2, 5, 3})), doctest::Contains("queries <= keys"), ShapeError);
}

TEST_CASE("gradient: layer normalisation (x, gamma, beta)") {
  Graph g;
  ValueId x = g.variable("x", {2, 3, 8}), gamma = g.variable("gamma", {8}), beta = g.variable("beta", {8});
  ValueId y = g.layer_norm(x, gamma, beta, 1e-5f)[0];
  check_gradients(g, y, {{x, random_tensor({2, 3, 8}, 14, -2.0f, 2.0f)},
                         {gamma, random_tensor({8}, 15, 0.5f, 1.5f)},
                         {beta, random_tensor({8}, 16)}});
}

TEST_CASE("gradient: conv2d with stride and padding") {
  for (int stride : {1, 2}) {
    CAPTURE(stride);
    Graph g;
    ValueId x = g.variable("x", {2, 5, 6, 3}), w = g.variable("w", {3, 3, 3, 4});
    Conv2dArgs args{.stride_h = stride, .stride_w = stride, .pad_top = 1, .pad_bottom = 1,
                    .pad_left = 1, .pad_right = 1};
    check_gradients(g, g.conv2d(x, w, args),
                    {{x, random_tensor({2, 5, 6, 3}, 17)}, {w, random_tensor({3, 3, 3, 4}, 18)}});
  }
}

TEST_CASE("gradient: max and average pooling") {
  for (PoolKind kind : {PoolKind::max, PoolKind::avg}) {
    CAPTURE(name(kind));
    Graph g;
    ValueId x = g.variable("x", {2, 4, 6, 3});
    // Distinct values a step apart keep every window's arg-max stable under ±h.
    std::vector<float> values(2 * 4 * 6 * 3);
    for (std::size_t i = 0; i < values.size(); ++i)
      values[i] = 0.05f * static_cast<float>((i * 37) % values.size());
    Pool2dArgs args{.kind = kind, .window_h = 2, .window_w = 2, .stride_h = 2, .stride_w = 2};
    check_gradients(g, g.pool2d(x, args), {{x, Tensor::from_vector(values, {2, 4, 6, 3})}});
  }
}

TEST_CASE("gradient: max pooling of a ReLU's output, the two gradients fused into one pass") {
  // Distinct values a step apart, none within a step of ReLU's kink at 0.
  std::vector<float> values(2 * 4 * 6 * 3);
  for (std::size_t i = 0; i < values.size(); ++i)
    values[i] = 0.05f * static_cast<float>((i * 37) % values.size()) - 1.025f;
  const Tensor at = Tensor::from_vector(values, {2, 4, 6, 3});
  auto relu_then_pool = [](Graph& g, ValueId x) {
    return g.pool2d(g.unary(UnaryOp::relu, x), {.kind = PoolKind::max});
  };
  Graph g;
  ValueId x = g.variable("x", {2, 4, 6, 3});
  check_gradients(g, relu_then_pool(g, x), {{x, at}});

  // The plan runs relu's gradient inside the pool's: no unary_grad is left.
  Graph h;
  ValueId hx = h.variable("x", {2, 4, 6, 3});
  ValueId loss = h.reduce(ReduceOp::sum, relu_then_pool(h, hx), {0, 1, 2, 3});
  ValueId dx = append_gradients(h, loss, {hx}).at(hx);
  MemoryPlan plan = plan_memory(h, {dx});
  for (NodeId n : plan.schedule) CHECK(h.node(n).kind != OpKind::unary_grad);
  REQUIRE(plan.epilogues.size() == 1);
  CHECK(h.node(plan.epilogues.begin()->first).kind == OpKind::pool2d_grad);
  CHECK(plan.epilogues.begin()->second.activation == Activation::relu);
  CHECK(plan.epilogues.begin()->second.out == dx);

  // The pool's own gradient kept as an output: nothing is fused.
  const NodeId pool_grad = plan.epilogues.begin()->first;
  MemoryPlan kept = plan_memory(h, {dx, h.node(pool_grad).outputs[0]});
  CHECK(kept.epilogues.empty());
}

TEST_CASE("gradient: embedding scatter-adds repeated ids") {
  Graph g;
  ValueId table = g.variable("table", {5, 3});
  ValueId ids = g.input("ids", {2, 3}, DType::i32);
  check_gradients(g, g.embedding(table, ids),
                  {{table, random_tensor({5, 3}, 19)},
                   {ids, Tensor::from_vector<std::int32_t>({0, 4, 2, 4, 4, 1}, {2, 3})}});
}

TEST_CASE("autodiff errors name the problem") {
  Graph g;
  ValueId x = g.variable("x", {3, 4});
  CHECK_THROWS_AS(append_gradients(g, x, {x}), ShapeError);  // not a scalar
  ValueId eq = g.reduce(ReduceOp::sum, g.layer_norm(x, g.variable("gamma", {4}), g.variable("beta", {4}))[1], {0});
  CHECK_THROWS_AS(append_gradients(g, eq, {x}), GraphError);  // through layer norm's saved mean
  ValueId unrelated = g.variable("unrelated", {2});
  ValueId s = g.reduce(ReduceOp::sum, x, {0, 1});
  auto grads = append_gradients(g, s, {unrelated});
  Executor exec(g, {grads.at(unrelated)});
  exec.run();  // a zero gradient needs no bound inputs
  check_close(exec.output(grads.at(unrelated)), {0.0f, 0.0f});
}

TEST_CASE("gradient: concat and slice") {
  Graph g;
  ValueId a = g.variable("a", {2, 3}), b = g.variable("b", {2, 2});
  ValueId joined = g.concat({a, b, a}, 1);  // [2, 8]
  CHECK(g.shape(joined) == Shape{2, 8});
  ValueId y = g.mul(g.slice(joined, 1, 2, 5), g.slice(joined, 1, 1, 5));  // overlapping slices
  check_gradients(g, y, {{a, random_tensor({2, 3}, 30)}, {b, random_tensor({2, 2}, 31)}});
}

TEST_CASE("gradient: batch normalisation built from primitive ops (training mode)") {
  Graph g;
  ValueId x = g.variable("x", {6, 3});
  std::vector<int> axes{0};
  ValueId mean = g.reduce(ReduceOp::mean, x, axes, true);
  ValueId centered = g.sub(x, mean);
  ValueId variance = g.reduce(ReduceOp::mean, g.mul(centered, centered), axes, true);
  ValueId y = g.mul(centered, g.unary(UnaryOp::rsqrt, g.add(variance, g.fill({}, 1e-3))));
  check_gradients(g, y, {{x, random_tensor({6, 3}, 40, -2.0f, 2.0f)}});
}

TEST_CASE("gradient: dropout passes the gradient through its mask, scaled") {
  // One executor run is one step: the forward and the perturbed runs share a mask.
  Graph g;
  ValueId x = g.variable("x", {4, 6});
  check_gradients(g, g.dropout(x, 0.5f, 17), {{x, random_tensor({4, 6}, 23)}});
}

TEST_CASE("dropout zeroes about rate of the elements and scales the rest by 1 / (1 - rate)") {
  const std::int64_t n = 20000;
  for (const float rate : {0.1f, 0.5f, 0.9f}) {
    CAPTURE(rate);
    Graph g;
    ValueId x = g.input("x", {n});
    ValueId y = g.dropout(x, rate, 5);
    Executor exec(g, {y});
    exec.bind(x, Tensor::from_vector(std::vector<float>(n, 2.0f), {n}));
    exec.run();
    std::int64_t zeros = 0;
    for (float v : exec.output(y).to_vector<float>()) {
      if (v == 0.0f) ++zeros;
      else CHECK(v == doctest::Approx(2.0f / (1.0f - rate)).epsilon(1e-6));
    }
    // 20000 Bernoulli draws: the fraction lies within 0.015 of the rate (over 4 standard deviations).
    CHECK(std::abs(static_cast<double>(zeros) / n - rate) < 0.015);
  }
}
