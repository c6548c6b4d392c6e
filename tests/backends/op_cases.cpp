#include "tests/backends/op_cases.hpp"

#include <doctest/doctest.h>

#include <map>

#include "backends/registry.hpp"
#include "engine/graph/autodiff.hpp"
#include "engine/graph/executor.hpp"
#include "tests/gpu_test_util.hpp"

namespace tessera::test {
namespace {

Backend& cpu() { return backend_for(Device::cpu(0)); }

}  // namespace

// `t` (on the CPU) converted to `dtype`.
Tensor cast_to(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor out = Tensor::empty(t.shape(), dtype);
  cpu().cast(t, out);
  return out;
}

namespace {
const std::vector<DType> kF32 = {DType::f32};
const std::vector<DType> kF32Bf16 = {DType::f32, DType::bf16};
}  // namespace

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
      return b.g.unary(op, positive ? b.leaf("x", {4, 7}, 1, 0.5f, 2.0f) : b.leaf("x", {4, 7}, 1, 0.1f, 1.0f));
    });
  }
  add("unary relu, both signs", kF32, true, [](Builder& b) {
    // Values 0.025 or more from 0: central differences with h = 1e-2 never cross the kink.
    return b.g.unary(UnaryOp::relu, b.spread("x", {4, 7}));
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
  add("broadcast_to", kF32Bf16, true, [](Builder& b) { return b.g.broadcast_to(b.leaf("x", {1, 6}, 1), {3, 6}); });
  add("reshape", kF32Bf16, true, [](Builder& b) {
    return b.g.add(b.g.reshape(b.leaf("x", {3, 4}, 1), {2, 6}), b.leaf("y", {2, 6}, 2));
  });
  add("transpose", kF32Bf16, true, [](Builder& b) { return b.g.transpose(b.leaf("x", {2, 3, 4}, 1), {2, 0, 1}); });
  for (bool log : {false, true})
    for (int axis : {-1, 0})
      add(std::string(log ? "log_softmax" : "softmax") + " axis " + std::to_string(axis), kF32, true,
          [log, axis](Builder& b) { return b.g.softmax(b.leaf("x", {4, 6}, 1, -2.0f, 2.0f), axis, log); });
  add("causal_softmax", kF32, true,
      [](Builder& b) { return b.g.causal_softmax(b.leaf("x", {2, 3, 5}, 1, -2.0f, 2.0f)); });  // 3 queries of 5 keys
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
  add("slice", kF32, true, [](Builder& b) { return b.g.slice(b.leaf("x", {4, 7}, 1), 1, 2, 4); });
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
    ValueId state = b.leaf("state", {6}, 1, -1.0f, 1.0f, true);
    b.g.moving_average(state, b.leaf("value", {6}, 2), 0.9f);
    b.updated = {state};
    return ValueId{-1};
  });
  // Sequence 0's two queries at positions 1 and 2 of 5, sequence 1's at 3 and 4: rows past them are never read.
  add("cached_attention", kF32, false, [](Builder& b) {
    return b.g.cached_attention(b.leaf("q", {2, 3, 2, 4}, 1), b.leaf("keys", {2, 3, 5, 4}, 2),
                                b.leaf("values", {2, 3, 5, 4}, 3), b.ids("positions", {2, 1}, {1, 3}), 0.5f);
  });
  // Attention as one op (as on a device with kernels for it), 3 queries over
  // 5 keys, heads 32 wide (the narrowest a GPU's kernels take); [B, H, T, K]
  // or [B, T, H, K].
  for (bool causal : {false, true})
    add(std::string("attention") + (causal ? " causal" : ""), kF32Bf16, true, [causal](Builder& b) {
      b.g.set_attention_kernel([](DType, DType, std::int64_t) { return true; });
      return b.g.attention(b.leaf("q", {2, 2, 3, 32}, 1), b.leaf("k", {2, 2, 5, 32}, 2),
                           b.leaf("v", {2, 2, 5, 32}, 3), {.scale = 0.25f, .causal = causal});
    });
  add("attention causal, tokens first", kF32Bf16, true, [](Builder& b) {
    b.g.set_attention_kernel([](DType, DType, std::int64_t) { return true; });
    return b.g.attention(b.leaf("q", {2, 3, 2, 32}, 1), b.leaf("k", {2, 5, 2, 32}, 2), b.leaf("v", {2, 5, 2, 32}, 3),
                         {.scale = 0.25f, .causal = true, .tokens_first = true});
  });
  add("cache_write", kF32Bf16, false, [](Builder& b) {
    ValueId cache = b.leaf("cache", {2, 3, 5, 4}, 1, -1.0f, 1.0f, true);
    b.g.cache_write(cache, b.leaf("rows", {2, 3, 2, 4}, 2), b.ids("positions", {2, 1}, {1, 3}));
    b.updated = {cache};
    return ValueId{-1};
  });
  return cases;
}

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

Tensor probe_value(const Run& r) {
  return cast_to(random_tensor(r.b.g.shape(r.probe), 1234, 0.5f, 1.5f), r.b.dtype);
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
    exec.bind(r.probe, on_device(probe_value(r)));
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


}  // namespace tessera::test
