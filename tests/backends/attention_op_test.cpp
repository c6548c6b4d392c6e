// The graph's attention op and its gradient (Graph::attention,
// Backend::attention and attention_backward). The op table (op_cases.cpp)
// checks the op's gradients against finite differences and its sharding;
// here: the graph builds the op only where the devices' kernel test takes
// it, the zoo GPT's training step with it computes what matmul, softmax and
// matmul compute, the CPU's f32 kernels against attention in double, the
// backend's checks, and (test suite "gpu", CUDA builds only)
// FlashAttention's forward and backward kernels against the CPU's bf16
// reference kernel.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "backends/registry.hpp"
#include "engine/graph/autodiff.hpp"
#include "engine/config/config.hpp"
#include "engine/graph/executor.hpp"
#include "engine/run/trainer.hpp"
#include "layers/model.hpp"
#include "tests/classifier.hpp"
#include "tests/gpu_test_util.hpp"
#include "tests/test_util.hpp"
#include "tessera_features.hpp"

using namespace tessera;
using namespace tessera::test;

namespace {

Backend& cpu() { return backend_for(Device::cpu(0)); }

std::int64_t count(const Graph& g, OpKind kind) {
  std::int64_t n = 0;
  for (NodeId node = 0; node < g.node_count(); ++node) n += g.node(node).kind == kind;
  return n;
}

// The zoo GPT's training step (the sum of its output as the loss) and the
// gradient of every variable, traced with attention as one op or not, run
// on `device` from the same weights and tokens.
std::vector<std::vector<float>> gpt_step(bool attention_op, DType precision, Device device) {
  const Model model = zoo_model("gpt.yaml");
  VariableStore store;
  Graph g;
  g.set_matmul_dtype(precision);
  if (attention_op) g.set_attention_kernel([](DType, DType, std::int64_t) { return true; });
  const auto traced = model.trace(g, 2, /*training=*/true, store, 7);
  const Shape out = g.shape(traced.output);
  const ValueId loss = g.reduce(ReduceOp::sum, g.mul(traced.output, traced.output), {0, 1, 2});
  std::vector<ValueId> wrt;
  for (const auto& [path, leaf] : traced.variables) wrt.push_back(leaf);
  std::vector<ValueId> outputs{loss};
  const auto grads = append_gradients(g, loss, wrt);
  for (ValueId variable : wrt) outputs.push_back(grads.at(variable));  // in the variables' order
  CHECK(count(g, OpKind::attention) == (attention_op ? 4 : 0));  // models/gpt.yaml: 4 blocks
  CHECK(count(g, OpKind::softmax) == (attention_op ? 0 : 4));
  // With the op, it reads the projections and the output projection reads its product: no head transposes.
  if (attention_op) CHECK(count(g, OpKind::transpose) == 0);

  Executor run(g, outputs, device);
  for (const auto& [path, leaf] : traced.variables) {
    const Tensor& value = store.find(path)->value;
    if (device.kind == DeviceKind::cpu) {
      run.bind(leaf, value);
    } else {
      Tensor on_device = Tensor::empty(value.shape(), value.dtype(), device);
      backend_for(device).copy(value, on_device);
      run.bind(leaf, on_device);
    }
  }
  const Shape tokens = g.shape(traced.inputs[0]);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(tokens.numel()));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 7 + 3) % out[2]);
  Tensor host_ids = Tensor::from_vector(ids, tokens), input = host_ids;
  if (device.kind != DeviceKind::cpu) {
    input = Tensor::empty(tokens, DType::i32, device);
    backend_for(device).copy(host_ids, input);
  }
  run.bind(traced.inputs[0], input);
  run.run();
  std::vector<std::vector<float>> results;
  for (ValueId o : outputs) {
    const Tensor& value = run.output(o);
    Tensor host = Tensor::empty(value.shape(), value.dtype());
    backend_for(value.device()).copy(value, host);
    results.push_back(host.to_vector<float>());
  }
  return results;
}

// Per tensor of a step (the loss, then each gradient): ||got - want|| over
// the larger of ||want|| and a thousandth of the largest tensor's norm. A
// gradient that is zero in exact arithmetic is rounding noise in both runs
// (a key bias's: softmax ignores what a row adds to all of its scores).
std::vector<double> step_errors(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want) {
  REQUIRE(got.size() == want.size());
  auto norm = [](const std::vector<float>& x) {
    double sum = 0;
    for (float v : x) sum += static_cast<double>(v) * v;
    return std::sqrt(sum);
  };
  double largest = 0;
  for (const auto& w : want) largest = std::max(largest, norm(w));
  std::vector<double> errors;
  for (std::size_t i = 0; i < got.size(); ++i) {
    REQUIRE(got[i].size() == want[i].size());
    std::vector<float> diff(got[i].size());
    for (std::size_t j = 0; j < diff.size(); ++j) diff[j] = got[i][j] - want[i][j];
    errors.push_back(norm(diff) / std::max({norm(want[i]), 1e-3 * largest, 1e-30}));
  }
  return errors;
}

// `step`, bf16, is as close to the f32 step `exact` as the unfused bf16 step `unfused` is (within `slack`).
// The op kinds one training step of the zoo GPT runs on `device` in
// `precision` (the executor's profile, keyed by op then details), the Trainer
// choosing.
std::set<std::string> trained_ops(Device device, const std::vector<std::string>& overrides = {},
                                  const std::string& precision = "bf16") {
  const Model model = zoo_model("gpt.yaml", overrides);
  VariableStore store;
  const TrainingSpec spec = parse_training(ConfigNode::parse(
      "training: {loss: {type: sparse_categorical_crossentropy, from_logits: true}, optimizer: {type: adam}, "
      "batch_size: 2, seed: 3, precision: " + precision + "}")["training"]);
  Trainer trainer(model, spec, store, device);
  std::vector<std::int32_t> tokens(2 * 128);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int32_t>((i * 11 + 5) % 256);
  const Tensor x = Tensor::from_vector(tokens, {2, 128});
  std::map<std::string, StepRunner::OpTime> profile;
  trainer.enable_profiling(&profile);
  trainer.train_step(x, x);
  std::set<std::string> ops;
  for (const auto& [key, time] : profile) ops.insert(key.substr(0, key.find(' ')));
  return ops;
}

void check_as_close_as_unfused(const std::vector<std::vector<float>>& step, const std::vector<std::vector<float>>& unfused,
                               const std::vector<std::vector<float>>& exact, double slack) {
  const std::vector<double> errors = step_errors(step, exact), unfused_errors = step_errors(unfused, exact);
  for (std::size_t i = 0; i < errors.size(); ++i) {
    CAPTURE(i);  // 0: the loss, then each variable's gradient
    CAPTURE(unfused_errors[i]);
    CHECK(errors[i] <= 1.25 * unfused_errors[i] + slack);
  }
}

}  // namespace

TEST_CASE("attention op: built only where the kernel test takes it, with the dtypes it was asked about") {
  std::vector<std::tuple<DType, DType, std::int64_t>> asked;
  bool answer = false;
  Graph g;
  g.set_matmul_dtype(DType::bf16);
  g.set_attention_kernel([&](DType operands, DType out, std::int64_t width) {
    asked.emplace_back(operands, out, width);
    return answer;
  });
  const ValueId q = g.input("q", {2, 3, 4, 8}), k = g.input("k", {2, 3, 6, 8}), v = g.input("v", {2, 3, 6, 8});
  const ValueId unfused = g.attention(q, k, v, {.scale = 0.5f, .causal = true});
  CHECK(count(g, OpKind::attention) == 0);
  CHECK(count(g, OpKind::softmax) == 1);
  CHECK(g.shape(unfused) == Shape{2, 3, 4, 8});
  answer = true;
  const ValueId fused = g.attention(q, k, v, {.scale = 0.5f, .causal = true});
  REQUIRE(count(g, OpKind::attention) == 1);
  const Node& node = g.node(g.value(fused).producer);
  CHECK(node.attrs.attention.causal);
  CHECK(node.attrs.attention.scale == doctest::Approx(0.5));
  CHECK(g.dtype(node.inputs[0]) == DType::bf16);  // mixed precision: the operands cast, the product kept in f32
  CHECK(g.dtype(fused) == DType::f32);
  CHECK(g.shape(node.outputs[1]) == Shape{2, 3, 4});  // logsumexp
  CHECK(g.dtype(node.outputs[1]) == DType::f32);
  REQUIRE(asked.size() == 2);
  CHECK(asked[1] == std::tuple{DType::bf16, DType::f32, std::int64_t{8}});

  // Its gradient is one op, reading dout rounded to the operands' dtype.
  const ValueId loss = g.reduce(ReduceOp::sum, fused, {0, 1, 2, 3});
  append_gradients(g, loss, {q, k, v});
  CHECK(count(g, OpKind::attention_grad) == 1);
  CHECK(count(g, OpKind::softmax_grad) == 0);

  CHECK_THROWS_WITH_AS(g.attention(q, g.input("k2", {2, 3, 3, 8}), g.input("v2", {2, 3, 3, 8}), {.causal = true}),
                       doctest::Contains("Tq <= Tk"), ShapeError);
  CHECK_THROWS_WITH_AS(g.attention(q, k, g.input("v3", {2, 3, 6, 4}), {}), doctest::Contains("must have k's shape"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(g.attention(g.input("q3", {4, 8}), g.input("k3", {6, 8}), g.input("v4", {6, 8}), {.tokens_first = true}),
                       doctest::Contains("[B, T, H, K]"), ShapeError);

  // Tokens first: the op reads and writes [B, T, H, K]; its logsumexp is [B, H, T].
  const ValueId tq = g.input("tq", {2, 4, 3, 8}), tk = g.input("tk", {2, 6, 3, 8});
  const ValueId tokens = g.attention(tq, tk, tk, {.scale = 0.5f, .causal = true, .tokens_first = true});
  CHECK(g.shape(tokens) == Shape{2, 4, 3, 8});
  CHECK(g.shape(g.node(g.value(tokens).producer).outputs[1]) == Shape{2, 3, 4});
  // Without the kernel, the same as transposes around matmul, softmax and matmul.
  answer = false;
  const ValueId unfused_tokens = g.attention(tq, tk, tk, {.scale = 0.5f, .causal = true, .tokens_first = true});
  CHECK(g.node(g.value(unfused_tokens).producer).kind == OpKind::transpose);
  CHECK(g.shape(unfused_tokens) == Shape{2, 4, 3, 8});
}

TEST_CASE("attention op: the zoo GPT's training step with it computes what matmul, softmax and matmul compute") {
  const auto exact = gpt_step(false, DType::f32, Device::cpu(0));
  SUBCASE("f32") {
    for (double error : step_errors(gpt_step(true, DType::f32, Device::cpu(0)), exact)) CHECK(error < 1e-5);
  }
  SUBCASE("bf16 products: as close to f32 as the unfused bf16 step") {
    const auto unfused = gpt_step(false, DType::bf16, Device::cpu(0));
    for (double error : step_errors(unfused, exact)) CHECK(error < 2e-2);  // what the slack below is against
    check_as_close_as_unfused(gpt_step(true, DType::bf16, Device::cpu(0)), unfused, exact, 1e-3);
  }
}

TEST_CASE("attention op: the Trainer builds it only where the device has the kernels (the CPU's: f32)") {
  const std::set<std::string> f32 = trained_ops(Device::cpu(0), {}, "f32");
  CHECK(f32.contains("attention"));
  CHECK(f32.contains("attention_grad"));
  CHECK_FALSE(f32.contains("transpose"));  // the kernels read the heads where the projections wrote them
  const std::set<std::string> bf16 = trained_ops(Device::cpu(0));
  CHECK_FALSE(bf16.contains("attention"));
  CHECK_FALSE(bf16.contains("attention_grad"));
  CHECK(bf16.contains("softmax_grad"));
}

namespace {

// A kernel case's k and v shape, logsumexp shape and arguments, from q's
// shape, the keys, causal or not and the layout (tokens first: q [B, T, H, K]).
struct KernelCase {
  Shape kv, rows;
  AttentionArgs args;
};

KernelCase kernel_case(const Shape& q, std::int64_t keys, bool causal, bool tokens_first) {
  Shape kv = q;
  kv[tokens_first ? 1 : kv.rank() - 2] = keys;
  std::vector<std::int64_t> row_dims(q.dims().begin(), q.dims().end() - 1);
  if (tokens_first) row_dims = {q[0], q[2], q[1]};
  return {kv, Shape(row_dims),
          {.scale = 1.0f / std::sqrt(static_cast<float>(q[q.rank() - 1])), .causal = causal, .tokens_first = tokens_first}};
}

// Attention and its gradients in double, one head at a time, from f32 tensors
// heads first ([..., T, K]) or tokens first ([B, T, H, K]): out, logsumexp, dq, dk, dv.
std::vector<std::vector<double>> attention_in_double(const Tensor& q, const Tensor& k, const Tensor& v,
                                                     const Tensor& dout, const AttentionArgs& args) {
  const Shape& qs = q.shape();
  const int r = qs.rank();
  const std::int64_t tq = args.tokens_first ? qs[1] : qs[r - 2], tk = args.tokens_first ? k.shape()[1] : k.shape()[r - 2];
  const std::int64_t width = qs[r - 1], heads = args.tokens_first ? qs[2] : 1, count = q.numel() / (tq * width);
  // Element (row, c) of head n.
  auto at = [&](std::int64_t n, std::int64_t rows, std::int64_t row, std::int64_t c) {
    if (!args.tokens_first) return (n * rows + row) * width + c;
    return ((n / heads * rows + row) * heads + n % heads) * width + c;
  };
  const std::vector<float> qv = q.to_vector<float>(), kv = k.to_vector<float>(), vv = v.to_vector<float>(),
                           dov = dout.to_vector<float>();
  std::vector<std::vector<double>> results = {std::vector<double>(qv.size()), std::vector<double>(count * tq),
                                         std::vector<double>(qv.size()), std::vector<double>(kv.size()),
                                         std::vector<double>(kv.size())};
  std::vector<double> &out = results[0], &lse = results[1], &dq = results[2], &dk = results[3], &dv = results[4];
  for (std::int64_t n = 0; n < count; ++n)
    for (std::int64_t i = 0; i < tq; ++i) {
      const std::int64_t seen = args.causal ? std::min(i + tk - tq + 1, tk) : tk;
      if (seen <= 0) {
        lse[n * tq + i] = -INFINITY;
        continue;
      }
      std::vector<double> p(static_cast<std::size_t>(seen)), dp(p.size());
      double max = -INFINITY, sum = 0;
      for (std::int64_t j = 0; j < seen; ++j) {
        for (std::int64_t c = 0; c < width; ++c) p[j] += double(qv[at(n, tq, i, c)]) * kv[at(n, tk, j, c)];
        p[j] *= args.scale;
        max = std::max(max, p[j]);
      }
      for (double& x : p) sum += x = std::exp(x - max);
      for (double& x : p) x /= sum;
      lse[n * tq + i] = max + std::log(sum);
      double d = 0;  // sum_j p_j dp_j
      for (std::int64_t j = 0; j < seen; ++j) {
        for (std::int64_t c = 0; c < width; ++c) {
          out[at(n, tq, i, c)] += p[j] * vv[at(n, tk, j, c)];
          dp[j] += double(dov[at(n, tq, i, c)]) * vv[at(n, tk, j, c)];
          dv[at(n, tk, j, c)] += p[j] * dov[at(n, tq, i, c)];
        }
        d += p[j] * dp[j];
      }
      for (std::int64_t j = 0; j < seen; ++j) {
        const double ds = p[j] * (dp[j] - d) * args.scale;
        for (std::int64_t c = 0; c < width; ++c) {
          dq[at(n, tq, i, c)] += ds * kv[at(n, tk, j, c)];
          dk[at(n, tk, j, c)] += ds * qv[at(n, tq, i, c)];
        }
      }
    }
  return results;
}

}  // namespace

TEST_CASE("attention op: the CPU's f32 kernels, block by block, compute attention and its gradients") {
  struct Case {
    Shape q;
    std::int64_t keys;
    bool causal;
    bool tokens_first = false;  // q [B, T, H, K]
  };
  const std::vector<Case> cases = {
      {Shape{2, 3, 128, 64}, 128, true},         // four whole blocks of 32 rows, each over its own keys
      {Shape{1, 2, 100, 16}, 100, true},         // a part block
      {Shape{3, 37, 8}, 70, true},               // fewer queries than keys: the last 37
      {Shape{2, 70, 24}, 70, false},
      {Shape{1, 1, 5, 64}, 130, false},
      {Shape{1, 1, 1, 4}, 1, true},
      {Shape{2, 100, 3, 16}, 100, true, true},   // tokens first: rows H x K apart
      {Shape{2, 40, 3, 8}, 70, false, true},
      {Shape{1, 2, 5, 8}, 0, false},             // no keys: every row attends to nothing
  };
  for (const Case& c : cases) {
    INFO("q " << c.q.str() << ", " << c.keys << " keys, causal " << c.causal << ", tokens first " << c.tokens_first);
    const auto [kv, rows, args] = kernel_case(c.q, c.keys, c.causal, c.tokens_first);
    const Tensor q = random_tensor(c.q, 41, -2.0f, 2.0f), k = random_tensor(kv, 42, -2.0f, 2.0f);
    const Tensor v = random_tensor(kv, 43, -1.0f, 1.0f), dout = random_tensor(c.q, 44, -1.0f, 1.0f);
    Tensor out = Tensor::empty(c.q, DType::f32), lse = Tensor::empty(rows, DType::f32);
    Tensor dq = Tensor::empty(c.q, DType::f32), dk = Tensor::empty(kv, DType::f32), dv = Tensor::empty(kv, DType::f32);
    for (const Tensor* t : {&out, &lse, &dq, &dk, &dv}) cpu().fill(*t, 7.0);  // every element written
    cpu().attention(q, k, v, out, lse, args);
    cpu().attention_backward(q, k, v, out, lse, dout, dq, dk, dv, args);
    const auto want = attention_in_double(q, k, v, dout, args);
    const Tensor* got[] = {&out, &lse, &dq, &dk, &dv};
    for (std::size_t i = 0; i < 5; ++i) {
      CAPTURE(i);  // out, logsumexp, dq, dk, dv
      const std::vector<float> g = got[i]->to_vector<float>();
      REQUIRE(g.size() == want[i].size());
      for (std::size_t j = 0; j < g.size(); ++j) {
        if (std::isinf(want[i][j])) {
          CHECK(g[j] == want[i][j]);  // a row that sees no key: logsumexp -inf
          continue;
        }
        if (std::abs(g[j] - want[i][j]) > 1e-5 + 1e-4 * std::abs(want[i][j])) {
          CAPTURE(j);
          CHECK(g[j] == doctest::Approx(want[i][j]).epsilon(1e-4));
          break;  // one mismatch per tensor is enough to read
        }
      }
    }
  }
}

TEST_CASE("attention op: no queries give keys and values no gradient, and heads of width 0 are refused") {
  const AttentionArgs args{.scale = 0.5f};
  Tensor dk = Tensor::empty(Shape{2, 6, 8}, DType::f32), dv = Tensor::empty(Shape{2, 6, 8}, DType::f32);
  cpu().fill(dk, 7.0);
  cpu().fill(dv, 7.0);
  cpu().attention_backward(zeros({2, 0, 8}), zeros({2, 6, 8}), zeros({2, 6, 8}), zeros({2, 0, 8}), zeros({2, 0}),
                           zeros({2, 0, 8}), zeros({2, 0, 8}), dk, dv, args);
  check_close(dk, std::vector<float>(96, 0.0f), 0, 0);
  check_close(dv, std::vector<float>(96, 0.0f), 0, 0);
  CHECK_THROWS_WITH_AS(cpu().attention(zeros({2, 4, 0}), zeros({2, 6, 0}), zeros({2, 6, 0}), zeros({2, 4, 0}),
                                       zeros({2, 4}), args),
                       doctest::Contains("width 0"), ShapeError);
}

TEST_CASE("attention op: the backend checks shapes and dtypes, and no gradient flows through logsumexp") {
  const Tensor q = zeros({2, 4, 8}), k = zeros({2, 6, 8}), out = zeros({2, 4, 8}), lse = zeros({2, 4});
  CHECK_THROWS_WITH_AS(cpu().attention(k, q, q, zeros({2, 6, 8}), zeros({2, 6}), {.causal = true}),
                       doctest::Contains("Tq <= Tk"), ShapeError);
  CHECK_THROWS_WITH_AS(cpu().attention(q, k, k, out, zeros({2, 5}), {}), doctest::Contains("logsumexp"), ShapeError);
  CHECK_THROWS_AS(cpu().attention(q, k, k, zeros({2, 4, 8}, DType::bf16), lse, {}), DTypeError);
  CHECK_THROWS_WITH_AS(cpu().attention_backward(q, k, k, out, lse, q, zeros({2, 4, 8}), zeros({2, 6, 4}), zeros({2, 6, 8}), {}),
                       doctest::Contains("dk"), ShapeError);
  CHECK_THROWS_WITH_AS(cpu().attention(q, k, k, out, lse, {.tokens_first = true}), doctest::Contains("rank 4"),
                       ShapeError);
  // Tokens first: logsumexp is [B, H, Tq].
  CHECK_THROWS_WITH_AS(cpu().attention(zeros({2, 4, 3, 8}), zeros({2, 6, 3, 8}), zeros({2, 6, 3, 8}), zeros({2, 4, 3, 8}),
                                       zeros({2, 4, 3}), {.tokens_first = true}),
                       doctest::Contains("logsumexp"), ShapeError);
  Graph g;
  g.set_attention_kernel([](DType, DType, std::int64_t) { return true; });
  const ValueId gq = g.input("q", {2, 4, 8}), gk = g.input("k", {2, 6, 8});
  const ValueId attended = g.attention(gq, gk, gk, {});
  const ValueId lse_value = g.node(g.value(attended).producer).outputs[1];
  CHECK_THROWS_WITH_AS(append_gradients(g, g.reduce(ReduceOp::sum, lse_value, {0, 1}), {gq}),
                       doctest::Contains("logsumexp"), GraphError);
}

// --- the kernels on a GPU ---------------------------------------------------------

#if TESSERA_HAVE_CUDA

namespace {

// `shape` of uniform values in [low, high), rounded to bf16 (and on the CPU).
Tensor bf16_random(const Shape& shape, unsigned seed, float low, float high) {
  Tensor rounded = Tensor::empty(shape, DType::bf16);
  cpu().cast(random_tensor(shape, seed, low, high), rounded);
  return rounded;
}

std::vector<float> as_f32(const Tensor& t) {
  Tensor host = to_host(t), out = Tensor::empty(t.shape(), DType::f32);
  cpu().cast(host, out);
  return out.to_vector<float>();
}

}  // namespace

TEST_CASE("cuda attention op: FlashAttention's forward and backward match the CPU's kernel, bit for bit on repeats" *
          doctest::test_suite("gpu") * skip_without_gpu()) {
  CHECK(gpu().prefers_attention_op(DType::bf16, DType::f32, 64));
  CHECK_FALSE(gpu().prefers_attention_op(DType::f32, DType::f32, 64));
  CHECK_FALSE(gpu().prefers_attention_op(DType::bf16, DType::f32, 80));
  CHECK_FALSE(cpu().prefers_attention_op(DType::bf16, DType::f32, 64));
  struct Case {
    Shape q;
    std::int64_t keys;
    bool causal;
    DType out;
    bool tokens_first = false;  // q [B, T, H, K]
  };
  const std::vector<Case> cases = {
      {Shape{2, 3, 128, 64}, 128, true, DType::f32},   // whole tiles of 64
      {Shape{1, 2, 100, 64}, 100, true, DType::f32},   // a part tile of queries and of keys
      {Shape{3, 37, 32}, 70, true, DType::f32},        // fewer queries than keys: the last 37
      {Shape{2, 70, 128}, 70, false, DType::bf16},
      {Shape{1, 1, 5, 64}, 130, false, DType::f32},
      {Shape{1, 1, 1, 64}, 1, true, DType::bf16},
      {Shape{2, 100, 3, 64}, 100, true, DType::f32, true},
      {Shape{2, 40, 3, 64}, 70, true, DType::bf16, true},
      {Shape{1, 2, 300, 64}, 300, true, DType::f32},  // five tiles: each double buffer loaded more than once
      {Shape{2, 200, 32}, 70, false, DType::f32},
      {Shape{1, 2, 130, 128}, 130, true, DType::f32},
  };
  for (const Case& c : cases) {
    INFO("q " << c.q.str() << ", " << c.keys << " keys, causal " << c.causal << ", tokens first " << c.tokens_first);
    const auto [kv, rows, args] = kernel_case(c.q, c.keys, c.causal, c.tokens_first);
    const Tensor q = bf16_random(c.q, 41, -2.0f, 2.0f), k = bf16_random(kv, 42, -2.0f, 2.0f);
    const Tensor v = bf16_random(kv, 43, -1.0f, 1.0f), dout = bf16_random(c.q, 44, -1.0f, 1.0f);
    // The CPU's reference kernel, in f32 on the same bf16 values.
    Tensor out = Tensor::empty(c.q, c.out), lse = Tensor::empty(rows, DType::f32);
    Tensor dq = Tensor::empty(c.q, c.out), dk = Tensor::empty(kv, c.out), dv = Tensor::empty(kv, c.out);
    cpu().attention(q, k, v, out, lse, args);
    cpu().attention_backward(q, k, v, out, lse, dout, dq, dk, dv, args);

    const Tensor gq = to_gpu(q), gk = to_gpu(k), gv = to_gpu(v), gdout = to_gpu(dout);
    std::vector<std::vector<float>> first;
    for (int run = 0; run < 2; ++run) {
      Tensor o = Tensor::empty(c.q, c.out, Device::cuda(0)), l = Tensor::empty(rows, DType::f32, Device::cuda(0));
      Tensor gdq = Tensor::empty(c.q, c.out, Device::cuda(0)), gdk = Tensor::empty(kv, c.out, Device::cuda(0));
      Tensor gdv = Tensor::empty(kv, c.out, Device::cuda(0));
      gpu().attention(gq, gk, gv, o, l, args);
      gpu().attention_backward(gq, gk, gv, o, l, gdout, gdq, gdk, gdv, args);
      const std::vector<std::vector<float>> got = {as_f32(o), as_f32(l), as_f32(gdq), as_f32(gdk), as_f32(gdv)};
      // The kernels round the weights and dS to bf16 for their products (2^-9 relative each).
      check_close(got[0], as_f32(out), 2e-2, 8e-3);
      check_close(got[1], as_f32(lse), 1e-3, 1e-3);
      check_close(got[2], as_f32(dq), 5e-2, 2e-2);
      check_close(got[3], as_f32(dk), 5e-2, 2e-2);
      check_close(got[4], as_f32(dv), 5e-2, 2e-2);
      if (run == 0) first = got;
      else
        for (std::size_t i = 0; i < got.size(); ++i)
          CHECK(std::memcmp(got[i].data(), first[i].data(), got[i].size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("cuda attention op: the Trainer builds it for bf16 training on cuda:0, not where the weights drop out" *
          doctest::test_suite("gpu") * skip_without_gpu()) {
  const std::set<std::string> ops = trained_ops(Device::cuda(0));
  CHECK(ops.contains("attention"));
  CHECK(ops.contains("attention_grad"));
  CHECK_FALSE(ops.contains("softmax_grad"));
  const std::set<std::string> dropped = trained_ops(Device::cuda(0), {"model.layers.3.dropout=0.1"});
  CHECK(dropped.contains("attention"));  // blocks 1-3
  CHECK(dropped.contains("softmax_grad"));  // block 0, whose weights drop out
}

TEST_CASE("cuda attention op: the zoo GPT's bf16 training step on cuda:0 with it is as close to f32 as the CPU's unfused one" *
          doctest::test_suite("gpu") * skip_without_gpu()) {
  const auto exact = gpt_step(false, DType::f32, Device::cpu(0));
  check_as_close_as_unfused(gpt_step(true, DType::bf16, Device::cuda(0)), gpt_step(false, DType::bf16, Device::cpu(0)),
                            exact, 2e-3);
}

#endif
