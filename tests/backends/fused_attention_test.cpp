// Fused attention (Backend::fused_attention, engine/graph/fusion.hpp): the
// memory plan joins a matmul of q by k^T, a softmax (causal or not), a cast
// and a matmul by v into one call only where the backend runs it and nothing
// else reads the scores or the weights, and the head transposes and casts
// around it where nothing else reads them; the backend checks its operands.
// The cases at the end (test suite "gpu", CUDA builds only) run the
// tensor-core kernel against the CPU's three ops in f32 on the same bf16
// inputs, in both layouts, and inference graphs on cuda:0, fused, against the
// CPU's unfused run.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <vector>

#include "backends/registry.hpp"
#include "engine/graph/autodiff.hpp"
#include "engine/graph/executor.hpp"
#include "engine/graph/memory_plan.hpp"
#include "layers/model.hpp"
#include "tests/classifier.hpp"
#include "tests/gpu_test_util.hpp"
#include "tests/test_util.hpp"
#include "tessera_features.hpp"

using namespace tessera;
using namespace tessera::test;

namespace {

Backend& cpu() { return backend_for(Device::cpu(0)); }

// scores = q k^T / sqrt(K), a (causal) softmax, an optional cast of the
// weights to v's dtype, then weights v: a MultiHeadAttention layer's graph.
struct AttentionGraph {
  AttentionGraph(const Shape& q_shape, std::int64_t keys, bool causal, DType matmul_dtype) {
    Shape kv = q_shape;
    kv[kv.rank() - 2] = keys;
    g.set_matmul_dtype(matmul_dtype);
    q = g.input("q", q_shape);
    k = g.input("k", kv);
    v = g.input("v", kv);
    const float scale = 1.0f / std::sqrt(static_cast<float>(q_shape[q_shape.rank() - 1]));
    scores = g.matmul(q, k, {.transpose_b = true, .alpha = scale});
    weights = causal ? g.causal_softmax(scores) : g.softmax(scores, -1);
    out = g.matmul(weights, v);
  }
  Graph g;
  ValueId q, k, v, scores, weights, out;
};

// As a MultiHeadAttention layer builds it: q, k, v [B, T, H, K] as projected,
// each transposed to [B, H, T, K], attention, and the product transposed back.
struct ProjectedAttentionGraph {
  ProjectedAttentionGraph(const Shape& projected, DType matmul_dtype) {
    g.set_matmul_dtype(matmul_dtype);
    q = g.input("q", projected);
    k = g.input("k", projected);
    v = g.input("v", projected);
    const std::vector<int> swap{0, 2, 1, 3};
    const float scale = 1.0f / std::sqrt(static_cast<float>(projected[3]));
    ValueId scores = g.matmul(g.transpose(q, swap), g.transpose(k, swap), {.transpose_b = true, .alpha = scale});
    out = g.transpose(g.matmul(g.causal_softmax(scores), g.transpose(v, swap)), swap);
  }
  Graph g;
  ValueId q, k, v, out;
};

// The call reads q, k and v as projected and writes its output so ([B, T, H, K]).
bool all_tokens_first(const FusedAttentionArgs& a) {
  return a.q_tokens_first && a.k_tokens_first && a.v_tokens_first && a.out_tokens_first;
}

std::int64_t count(const Graph& g, const MemoryPlan& plan, OpKind kind) {
  std::int64_t n = 0;
  for (NodeId node : plan.schedule) n += g.node(node).kind == kind;
  return n;
}

}  // namespace

TEST_CASE("fused attention: the plan joins matmul, softmax, cast and matmul only where the backend runs them") {
  std::vector<std::tuple<DType, DType, DType, std::int64_t>> asked;
  auto yes = [&](DType stored, DType multiply, DType out, std::int64_t width) {
    asked.emplace_back(stored, multiply, out, width);
    return true;
  };
  SUBCASE("mixed precision: bf16 operands, f32 product") {
    AttentionGraph a({2, 3, 5, 8}, 7, /*causal=*/true, DType::bf16);
    MemoryPlan plan = plan_memory(a.g, {a.out}, yes);
    REQUIRE(plan.attentions.size() == 1);
    const auto& [node, f] = *plan.attentions.begin();
    CHECK(a.g.node(node).outputs[0] == a.out);
    CHECK(f.out == a.out);
    CHECK(f.args.causal);
    CHECK(f.args.scale == doctest::Approx(1.0 / std::sqrt(8.0)));
    CHECK(f.args.multiply == DType::bf16);
    CHECK_FALSE(f.args.q_tokens_first);  // q, k, v are inputs here, not transposes: read as they are
    CHECK_FALSE(f.args.out_tokens_first);
    CHECK(a.g.dtype(f.q) == DType::bf16);  // the casts of q, k and v stay: the kernel reads bf16
    CHECK(a.g.node(a.g.value(f.q).producer).kind == OpKind::cast);
    CHECK(count(a.g, plan, OpKind::softmax) == 0);
    CHECK(count(a.g, plan, OpKind::matmul) == 1);
    CHECK(count(a.g, plan, OpKind::cast) == 3);
    REQUIRE(asked.size() == 1);
    CHECK(asked[0] == std::tuple{DType::bf16, DType::bf16, DType::f32, std::int64_t{8}});
    // The scores and the weights take no memory.
    CHECK(plan.offset[static_cast<std::size_t>(a.scores)] == MemoryPlan::kExternal);
    CHECK(plan.offset[static_cast<std::size_t>(a.weights)] == MemoryPlan::kExternal);
    // What the fused call reads lives until it runs.
    const int at = static_cast<int>(std::find(plan.schedule.begin(), plan.schedule.end(), node) - plan.schedule.begin());
    for (ValueId read : {f.q, f.k, f.v}) CHECK(plan.last_use[static_cast<std::size_t>(plan.storage_of[read])] >= at);
  }
  SUBCASE("mixed precision: a product only cast to bf16, through a reshape, is written in bf16 by the call") {
    AttentionGraph a({2, 3, 5, 8}, 7, /*causal=*/true, DType::bf16);
    const ValueId operand = a.g.cast(a.g.reshape(a.out, {2, 3, 40}), DType::bf16);  // the next product's
    MemoryPlan plan = plan_memory(a.g, {operand}, yes);
    REQUIRE(plan.attentions.size() == 1);  // not taken by the product's own cast fusion (fuse_epilogues)
    const FusedAttention& f = plan.attentions.begin()->second;
    CHECK(f.out == operand);
    CHECK(f.out_shape == a.g.shape(a.out));
    CHECK(plan.epilogues.empty());
    CHECK(count(a.g, plan, OpKind::cast) == 3);  // q's, k's and v's
    CHECK(std::get<2>(asked.back()) == DType::bf16);
    // Where the backend writes no bf16 out, the cast stays.
    auto f32_out_only = [](DType, DType, DType out, std::int64_t) { return out == DType::f32; };
    MemoryPlan apart = plan_memory(a.g, {operand}, f32_out_only);
    REQUIRE(apart.attentions.size() == 1);
    CHECK(apart.attentions.begin()->second.out == a.out);
    CHECK(count(a.g, apart, OpKind::cast) == 4);
  }
  SUBCASE("f32, not causal") {
    AttentionGraph a({4, 6, 16}, 6, /*causal=*/false, DType::f32);
    MemoryPlan plan = plan_memory(a.g, {a.out}, yes);
    REQUIRE(plan.attentions.size() == 1);
    CHECK_FALSE(plan.attentions.begin()->second.args.causal);
    CHECK(plan.attentions.begin()->second.args.multiply == DType::f32);
    CHECK(plan.attentions.begin()->second.q == a.q);
    CHECK(count(a.g, plan, OpKind::softmax) == 0);
  }
  SUBCASE("not where the backend has no kernel, or nothing is asked") {
    AttentionGraph a({2, 3, 5, 8}, 7, true, DType::bf16);
    CHECK(plan_memory(a.g, {a.out}, [](DType, DType, DType, std::int64_t) { return false; }).attentions.empty());
    CHECK(plan_memory(a.g, {a.out}).attentions.empty());
    CHECK(count(a.g, plan_memory(a.g, {a.out}), OpKind::softmax) == 1);
  }
  SUBCASE("not where the weights or the scores are read again (training's backward, an output)") {
    AttentionGraph a({2, 3, 5, 8}, 5, true, DType::f32);
    CHECK(plan_memory(a.g, {a.out, a.weights}, yes).attentions.empty());
    CHECK(plan_memory(a.g, {a.out, a.scores}, yes).attentions.empty());
    ValueId again = a.g.reduce(ReduceOp::sum, a.weights, {3});
    CHECK(plan_memory(a.g, {a.out, again}, yes).attentions.empty());
  }
  SUBCASE("the head transposes and casts around it, as a MultiHeadAttention layer makes them") {
    ProjectedAttentionGraph a({2, 7, 3, 8}, DType::bf16);
    MemoryPlan plan = plan_memory(a.g, {a.out}, yes);
    REQUIRE(plan.attentions.size() == 1);
    const FusedAttention& f = plan.attentions.begin()->second;
    CHECK(f.q == a.q);
    CHECK(f.k == a.k);
    CHECK(f.v == a.v);
    CHECK(f.out == a.out);
    CHECK(all_tokens_first(f.args));
    CHECK(f.args.multiply == DType::bf16);
    CHECK(plan.schedule.size() == 4);  // the three inputs and the fused call
    CHECK(std::find(asked.begin(), asked.end(), std::tuple{DType::f32, DType::bf16, DType::f32, std::int64_t{8}}) !=
          asked.end());
    // A backend that takes only bf16 operands keeps the casts (and their transposes).
    MemoryPlan bf16_only = plan_memory(a.g, {a.out}, [](DType stored, DType, DType, std::int64_t) {
      return stored == DType::bf16;
    });
    REQUIRE(bf16_only.attentions.size() == 1);
    CHECK_FALSE(bf16_only.attentions.begin()->second.args.q_tokens_first);
    CHECK(bf16_only.attentions.begin()->second.args.out_tokens_first);
    CHECK(count(a.g, bf16_only, OpKind::cast) == 3);
    CHECK(count(a.g, bf16_only, OpKind::transpose) == 3);
    // In f32 there are no casts: the call reads through the transposes alone (the CPU's case).
    ProjectedAttentionGraph f32({2, 7, 3, 8}, DType::f32);
    MemoryPlan in_f32 = plan_memory(f32.g, {f32.out}, yes);
    REQUIRE(in_f32.attentions.size() == 1);
    const FusedAttention& g = in_f32.attentions.begin()->second;
    CHECK(g.q == f32.q);
    CHECK(all_tokens_first(g.args));
    CHECK(g.args.multiply == DType::f32);
    CHECK(in_f32.schedule.size() == 4);
    // A backend that multiplies in bf16 only (CUDA's) fuses no f32 attention.
    CHECK(plan_memory(f32.g, {f32.out}, [](DType, DType multiply, DType, std::int64_t) {
            return multiply == DType::bf16;
          }).attentions.empty());
  }
  SUBCASE("not where a cache write comes between the products: the keys would be read after it") {
    Graph g;
    ValueId q = g.input("q", {1, 2, 3, 8}), cache = g.variable("keys", {1, 2, 5, 8}), v = g.input("v", {1, 2, 5, 8});
    ValueId rows = g.input("rows", {1, 2, 1, 8}), positions = g.input("positions", {1, 1}, DType::i32);
    ValueId scores = g.matmul(q, cache, {.transpose_b = true});
    g.cache_write(cache, rows, positions);
    ValueId out = g.matmul(g.softmax(scores, -1), v);
    CHECK(plan_memory(g, {out}, yes).attentions.empty());
    Graph h;  // the same without the write fuses
    ValueId hq = h.input("q", {1, 2, 3, 8}), hk = h.variable("keys", {1, 2, 5, 8}), hv = h.input("v", {1, 2, 5, 8});
    ValueId hout = h.matmul(h.softmax(h.matmul(hq, hk, {.transpose_b = true}), -1), hv);
    CHECK(plan_memory(h, {hout}, yes).attentions.size() == 1);
  }
  SUBCASE("the transposes stay where something else reads one of them; the output's is still the call's") {
    ProjectedAttentionGraph a({2, 7, 3, 8}, DType::bf16);
    // The transposed q, read by the cast and kept as an output too.
    ValueId swapped_q = -1;
    for (NodeId n = 0; n < a.g.node_count(); ++n)
      if (a.g.node(n).kind == OpKind::transpose && a.g.node(n).inputs[0] == a.q) swapped_q = a.g.node(n).outputs[0];
    REQUIRE(swapped_q >= 0);
    MemoryPlan plan = plan_memory(a.g, {a.out, swapped_q}, yes);
    REQUIRE(plan.attentions.size() == 1);
    const FusedAttention& f = plan.attentions.begin()->second;
    CHECK_FALSE(f.args.q_tokens_first);  // all three or none: q's transpose is read elsewhere
    CHECK_FALSE(f.args.k_tokens_first);
    CHECK(f.args.out_tokens_first);
    CHECK(count(a.g, plan, OpKind::transpose) == 3);
  }
  SUBCASE("not for other shapes of the same ops") {
    Graph g;  // keys broadcast over the batch axis
    ValueId q = g.input("q", {2, 5, 8}), k = g.input("k", {1, 5, 8}), v = g.input("v", {1, 5, 8});
    ValueId out = g.matmul(g.softmax(g.matmul(q, k, {.transpose_b = true}), -1), v);
    CHECK(plan_memory(g, {out}, yes).attentions.empty());
    Graph h;  // a softmax over the queries' axis
    ValueId hq = h.input("q", {5, 8}), hk = h.input("k", {5, 8}), hv = h.input("v", {5, 8});
    ValueId hout = h.matmul(h.softmax(h.matmul(hq, hk, {.transpose_b = true}), 0), hv);
    CHECK(plan_memory(h, {hout}, yes).attentions.empty());
    Graph w;  // values narrower than the keys
    ValueId wq = w.input("q", {5, 8}), wk = w.input("k", {5, 8}), wv = w.input("v", {5, 4});
    ValueId wout = w.matmul(w.softmax(w.matmul(wq, wk, {.transpose_b = true}), -1), wv);
    CHECK(plan_memory(w, {wout}, yes).attentions.empty());
  }
}

TEST_CASE("fused attention: the zoo GPT's bf16 inference fuses each block's attention with its head transposes") {
  const Model model = test::zoo_model("gpt.yaml");
  VariableStore store;
  Graph g;
  g.set_matmul_dtype(DType::bf16);
  const auto traced = model.trace(g, 2, /*training=*/false, store, 0);
  const MemoryPlan plan = plan_memory(g, {traced.output}, [](DType, DType, DType, std::int64_t) { return true; });
  REQUIRE(plan.attentions.size() == 4);  // models/gpt.yaml: 4 blocks
  for (const auto& [node, f] : plan.attentions) {
    CHECK(f.args.causal);
    CHECK(all_tokens_first(f.args));
  }
  CHECK(count(g, plan, OpKind::softmax) == 0);
  CHECK(count(g, plan, OpKind::transpose) == 0);
  // Each call writes the output projection's bf16 operand itself, and so does
  // the feed-forward product its GELU's (fuse_epilogues): the casts left are
  // the weights'.
  for (const auto& [node, f] : plan.attentions) {
    CHECK(g.dtype(f.out) == DType::bf16);
    CHECK(f.out_shape.rank() == 4);
    CHECK(f.out_shape.numel() == g.shape(f.out).numel());
  }
  for (NodeId n : plan.schedule)
    if (g.node(n).kind == OpKind::cast) {
      ValueId read = g.node(n).inputs[0];
      while (g.node(g.value(read).producer).kind == OpKind::reshape) read = g.node(g.value(read).producer).inputs[0];
      CAPTURE(g.value(read).name);
      CHECK(g.node(g.value(read).producer).kind == OpKind::variable);
    }
  // Training keeps the unfused ops: its backward reads the weights.
  Graph t;
  t.set_matmul_dtype(DType::bf16);
  const auto trained = model.trace(t, 2, /*training=*/true, store, 0);
  const ValueId loss = t.reduce(ReduceOp::sum, trained.output, {0, 1, 2});
  std::vector<ValueId> wrt;
  for (const auto& [path, leaf] : trained.variables) wrt.push_back(leaf);
  std::vector<ValueId> outputs{loss};
  for (const auto& [variable, grad] : append_gradients(t, loss, wrt)) outputs.push_back(grad);
  CHECK(plan_memory(t, outputs, [](DType, DType, DType, std::int64_t) { return true; }).attentions.empty());
}

TEST_CASE("fused attention on the CPU in f32, in every layout, equals matmul, softmax and matmul") {
  // 70 queries (a whole block of 64 and a part), 90 keys; heads of 16.
  const Shape q_shape{2, 3, 70, 16}, kv_shape{2, 3, 90, 16};
  const Tensor q = random_tensor(q_shape, 61), k = random_tensor(kv_shape, 62), v = random_tensor(kv_shape, 63);
  const std::vector<int> swap{0, 2, 1, 3};
  auto swapped = [&](const Tensor& t) {
    const Shape& s = t.shape();
    Tensor out = Tensor::empty({s[0], s[2], s[1], s[3]}, DType::f32);
    cpu().transpose(t, out, swap);
    return out;
  };
  CHECK(cpu().supports_fused_attention(DType::f32, DType::f32, DType::f32, 16));
  CHECK_FALSE(cpu().supports_fused_attention(DType::f32, DType::bf16, DType::f32, 16));
  CHECK_FALSE(cpu().supports_fused_attention(DType::bf16, DType::bf16, DType::f32, 16));
  const float scale = 0.25f;
  // The three ops, heads first.
  auto reference = [&](const Tensor& queries, const Tensor& keys, const Tensor& values, bool causal) {
    const Shape& s = queries.shape();
    Tensor scores = Tensor::empty({s[0], s[1], s[2], keys.shape()[2]}, DType::f32);
    Tensor weights = Tensor::empty(scores.shape(), DType::f32), out = Tensor::empty(s, DType::f32);
    cpu().matmul(queries, keys, nullptr, scores, {.transpose_b = true, .alpha = scale});
    cpu().softmax(scores, weights, -1, /*log=*/false, causal);
    cpu().matmul(weights, values, nullptr, out, {});
    return out;
  };
  for (bool causal : {false, true}) {
    const Tensor expected = reference(q, k, v, causal);
    // Each operand heads first or tokens first: all alike (one pass), or mixed (copied heads first).
    for (int layout = 0; layout < 16; ++layout) {
      const bool q_tf = layout & 1, k_tf = layout & 2, v_tf = layout & 4, out_tf = layout & 8;
      CAPTURE(causal);
      CAPTURE(layout);
      const FusedAttentionArgs args{.scale = scale, .causal = causal, .multiply = DType::f32, .q_tokens_first = q_tf,
                                    .k_tokens_first = k_tf, .v_tokens_first = v_tf, .out_tokens_first = out_tf};
      Tensor out = out_tf ? random_tensor({2, 70, 3, 16}, 64) : random_tensor(q_shape, 64);  // garbage to overwrite
      cpu().fused_attention(q_tf ? swapped(q) : q, k_tf ? swapped(k) : k, v_tf ? swapped(v) : v, out, args);
      check_close(out_tf ? swapped(out) : out, expected.to_vector<float>(), 1e-5, 1e-6);
    }
  }
  // As a MultiHeadAttention layer makes it (causal, scale 1/sqrt(16), as many
  // keys as queries): an executor on the CPU plans the call, the head
  // transposes its own.
  const Tensor k70 = random_tensor(q_shape, 65), v70 = random_tensor(q_shape, 66);
  ProjectedAttentionGraph layer({2, 70, 3, 16}, DType::f32);
  Executor run(layer.g, {layer.out});
  CHECK(run.plan().attentions.size() == 1);
  CHECK(run.plan().schedule.size() == 4);
  run.bind(layer.q, swapped(q));
  run.bind(layer.k, swapped(k70));
  run.bind(layer.v, swapped(v70));
  run.run();
  check_close(swapped(run.output(layer.out)), reference(q, k70, v70, /*causal=*/true).to_vector<float>(), 1e-5, 1e-6);
}

TEST_CASE("fused attention on the CPU checks its operands and refuses what it has no kernel for") {
  const Tensor q = zeros({2, 4, 8}), k = zeros({2, 6, 8}), out = zeros({2, 4, 8});
  const FusedAttentionArgs causal{.causal = true, .multiply = DType::f32}, open{.multiply = DType::f32};
  CHECK_THROWS_WITH_AS(cpu().fused_attention(q, k, k, out, FusedAttentionArgs{.multiply = DType::bf16}),
                       doctest::Contains("has no kernel"), UnsupportedError);
  CHECK_THROWS_WITH_AS(cpu().fused_attention(q, zeros({3, 6, 8}), zeros({3, 6, 8}), out, open),
                       doctest::Contains("the same leading axes"), ShapeError);
  CHECK_THROWS_WITH_AS(cpu().fused_attention(k, q, q, zeros({2, 6, 8}), causal), doctest::Contains("Tq <= Tk"),
                       ShapeError);
  CHECK_THROWS_AS(cpu().fused_attention(q, k, zeros({2, 6, 4}), out, open), ShapeError);
  // [B, T, H, K] operands: checked as [B, H, T, K].
  const Tensor heads_first = zeros({2, 3, 5, 8});
  const FusedAttentionArgs mixed{.multiply = DType::f32, .q_tokens_first = true};
  CHECK_THROWS_WITH_AS(cpu().fused_attention(heads_first, heads_first, heads_first, heads_first, mixed),
                       doctest::Contains("heads-first"), ShapeError);
  CHECK_THROWS_WITH_AS(cpu().fused_attention(q, k, k, out, FusedAttentionArgs{.multiply = DType::f32, .k_tokens_first = true}),
                       doctest::Contains("not of rank 4"), ShapeError);
  // bf16 values are not multiplied in f32.
  const Tensor q16 = zeros({2, 4, 8}, DType::bf16), k16 = zeros({2, 6, 8}, DType::bf16);
  CHECK_THROWS_AS(cpu().fused_attention(q16, k16, k16, out, open), DTypeError);
}

// --- the kernel on a GPU ----------------------------------------------------------

#if TESSERA_HAVE_CUDA

namespace {

// `shape` of uniform values in [low, high), rounded to bf16: a bf16 tensor and its f32 copy.
std::pair<Tensor, Tensor> bf16_inputs(const Shape& shape, unsigned seed, float low, float high) {
  Tensor rounded = Tensor::empty(shape, DType::bf16), exact = Tensor::empty(shape, DType::f32);
  cpu().cast(random_tensor(shape, seed, low, high), rounded);
  cpu().cast(rounded, exact);
  return {rounded, exact};
}

struct KernelCase {
  Shape q;
  std::int64_t keys;
  bool causal;
};

}  // namespace

TEST_CASE("cuda fused attention matches the CPU's matmul, softmax and matmul, and repeats bit for bit" *
          doctest::test_suite("gpu") * skip_without_gpu()) {
  CHECK(gpu().supports_fused_attention(DType::bf16, DType::bf16, DType::f32, 64));
  CHECK(gpu().supports_fused_attention(DType::bf16, DType::bf16, DType::bf16, 128));
  CHECK_FALSE(gpu().supports_fused_attention(DType::f32, DType::f32, DType::f32, 64));  // f32 products
  CHECK_FALSE(gpu().supports_fused_attention(DType::bf16, DType::bf16, DType::f32, 80));
  const std::vector<KernelCase> cases = {
      {Shape{2, 3, 256, 64}, 256, true},  // whole tiles of 64
      {Shape{1, 2, 100, 64}, 100, true},  // a part tile of queries and of keys
      {Shape{3, 37, 32}, 70, true},       // fewer queries than keys: the last 37
      {Shape{2, 70, 128}, 70, false},
      {Shape{1, 1, 5, 64}, 130, false},
      {Shape{1, 1, 1, 64}, 1, true},
  };
  for (const KernelCase& c : cases) {
    CAPTURE(c.q.str());
    CAPTURE(c.keys);
    CAPTURE(c.causal);
    Shape kv = c.q;
    kv[kv.rank() - 2] = c.keys;
    const std::int64_t width = c.q[c.q.rank() - 1];
    const float scale = 1.0f / std::sqrt(static_cast<float>(width));
    const auto [q, q32] = bf16_inputs(c.q, 11, -2.0f, 2.0f);
    const auto [k, k32] = bf16_inputs(kv, 12, -2.0f, 2.0f);
    const auto [v, v32] = bf16_inputs(kv, 13, -1.0f, 1.0f);
    // The CPU: the three ops in f32 on the rounded inputs.
    Shape scores_shape = c.q;
    scores_shape[scores_shape.rank() - 1] = c.keys;
    Tensor scores = Tensor::empty(scores_shape, DType::f32), weights = Tensor::empty(scores_shape, DType::f32);
    Tensor want = Tensor::empty(c.q, DType::f32);
    cpu().matmul(q32, k32, nullptr, scores, {.transpose_b = true, .alpha = scale});
    cpu().softmax(scores, weights, scores_shape.rank() - 1, false, c.causal);
    cpu().matmul(weights, v32, nullptr, want, {});
    const std::vector<float> expected = want.to_vector<float>();

    const Tensor gq = to_gpu(q), gk = to_gpu(k), gv = to_gpu(v);
    std::vector<float> first;
    for (int run = 0; run < 2; ++run) {
      Tensor out = Tensor::empty(c.q, DType::f32, Device::cuda(0));
      gpu().fused_attention(gq, gk, gv, out, {.scale = scale, .causal = c.causal});
      const std::vector<float> got = to_host(out).to_vector<float>();
      // The weights meet v rounded to bf16 (2^-9 relative), as the unfused bf16 product's do.
      check_close(got, expected, 1e-2, 4e-3);
      if (run == 0) first = got;
      else CHECK(std::memcmp(got.data(), first.data(), got.size() * sizeof(float)) == 0);
    }
    Tensor out16 = Tensor::empty(c.q, DType::bf16, Device::cuda(0)), back = Tensor::empty(c.q, DType::f32);
    gpu().fused_attention(gq, gk, gv, out16, {.scale = scale, .causal = c.causal});
    cpu().cast(to_host(out16), back);
    check_close(back.to_vector<float>(), expected, 2e-2, 8e-3);
  }
}

TEST_CASE("cuda fused attention reads f32 [B, T, H, K] operands, rounding them, and writes its output so" *
          doctest::test_suite("gpu") * skip_without_gpu()) {
  CHECK(gpu().supports_fused_attention(DType::f32, DType::bf16, DType::f32, 64));
  const std::vector<int> swap{0, 2, 1, 3};
  struct Case {
    std::int64_t tokens, keys;
    bool causal;
  };
  for (const Case& c : {Case{100, 100, true}, Case{40, 70, true}, Case{33, 50, false}}) {
    const std::int64_t tokens = c.tokens, keys = c.keys;
    const bool causal = c.causal;
    CAPTURE(tokens);
    CAPTURE(keys);
    const Shape q_shape{2, tokens, 3, 64}, kv_shape{2, keys, 3, 64};
    const Tensor q = random_tensor(q_shape, 31, -2.0f, 2.0f), k = random_tensor(kv_shape, 32, -2.0f, 2.0f);
    const Tensor v = random_tensor(kv_shape, 33);
    // The CPU: each transposed to [B, H, T, K] and rounded to bf16, the three ops, the product transposed back.
    auto heads_first_rounded = [&](const Tensor& x) {
      const Shape& s = x.shape();
      Tensor swapped = Tensor::empty({s[0], s[2], s[1], s[3]}, DType::f32), rounded = Tensor::empty(swapped.shape(), DType::bf16);
      cpu().transpose(x, swapped, swap);
      cpu().cast(swapped, rounded);
      cpu().cast(rounded, swapped);
      return swapped;
    };
    const Tensor q32 = heads_first_rounded(q), k32 = heads_first_rounded(k), v32 = heads_first_rounded(v);
    const float scale = 0.125f;
    Tensor scores = Tensor::empty({2, 3, tokens, keys}, DType::f32), weights = Tensor::empty(scores.shape(), DType::f32);
    Tensor product = Tensor::empty({2, 3, tokens, 64}, DType::f32), want = Tensor::empty(q_shape, DType::f32);
    cpu().matmul(q32, k32, nullptr, scores, {.transpose_b = true, .alpha = scale});
    cpu().softmax(scores, weights, 3, false, causal);
    cpu().matmul(weights, v32, nullptr, product, {});
    cpu().transpose(product, want, swap);

    Tensor out = Tensor::empty(q_shape, DType::f32, Device::cuda(0));
    gpu().fused_attention(to_gpu(q), to_gpu(k), to_gpu(v), out,
                          {.scale = scale, .causal = causal, .q_tokens_first = true, .k_tokens_first = true,
                           .v_tokens_first = true, .out_tokens_first = true});
    check_close(to_host(out).to_vector<float>(), want.to_vector<float>(), 1e-2, 4e-3);
  }
}

TEST_CASE("cuda fused attention: an inference graph in bf16 runs it and gives the CPU's unfused result" *
          doctest::test_suite("gpu") * skip_without_gpu()) {
  AttentionGraph a({2, 4, 96, 64}, 96, /*causal=*/true, DType::bf16);
  const Tensor q = random_tensor({2, 4, 96, 64}, 21, -2.0f, 2.0f), k = random_tensor({2, 4, 96, 64}, 22, -2.0f, 2.0f);
  const Tensor v = random_tensor({2, 4, 96, 64}, 23);
  Executor on_cpu(a.g, {a.out}), on_gpu(a.g, {a.out}, Device::cuda(0));
  CHECK(on_cpu.plan().attentions.empty());
  CHECK(on_gpu.plan().attentions.size() == 1);
  on_cpu.bind(a.q, q);
  on_cpu.bind(a.k, k);
  on_cpu.bind(a.v, v);
  on_gpu.bind(a.q, to_gpu(q));
  on_gpu.bind(a.k, to_gpu(k));
  on_gpu.bind(a.v, to_gpu(v));
  on_cpu.run();
  on_gpu.run();
  // The CPU rounds the normalised weights to bf16, the kernel the unnormalised ones.
  check_close(to_host(on_gpu.output(a.out)).to_vector<float>(), on_cpu.output(a.out).to_vector<float>(), 2e-2, 8e-3);

  // As a MultiHeadAttention layer makes it: the transposes and casts are the call's too.
  ProjectedAttentionGraph p({2, 96, 4, 64}, DType::bf16);
  Executor projected_cpu(p.g, {p.out}), projected_gpu(p.g, {p.out}, Device::cuda(0));
  REQUIRE(projected_gpu.plan().attentions.size() == 1);
  CHECK(projected_gpu.plan().attentions.begin()->second.args.q_tokens_first);
  CHECK(projected_gpu.plan().schedule.size() == 4);
  const Tensor pq = random_tensor({2, 96, 4, 64}, 24, -2.0f, 2.0f), pk = random_tensor({2, 96, 4, 64}, 25, -2.0f, 2.0f);
  const Tensor pv = random_tensor({2, 96, 4, 64}, 26);
  for (auto [leaf, value] : {std::pair{p.q, pq}, std::pair{p.k, pk}, std::pair{p.v, pv}}) {
    projected_cpu.bind(leaf, value);
    projected_gpu.bind(leaf, to_gpu(value));
  }
  projected_cpu.run();
  projected_gpu.run();
  check_close(to_host(projected_gpu.output(p.out)).to_vector<float>(), projected_cpu.output(p.out).to_vector<float>(),
              2e-2, 8e-3);

  // The output projection's bf16 operand (heads joined by a reshape, cast): the call writes it.
  const ValueId operand = p.g.cast(p.g.reshape(p.out, {2, 96, 256}), DType::bf16);
  Executor operand_cpu(p.g, {operand}), operand_gpu(p.g, {operand}, Device::cuda(0));
  REQUIRE(operand_gpu.plan().attentions.size() == 1);
  CHECK(operand_gpu.plan().attentions.begin()->second.out == operand);
  for (auto [leaf, value] : {std::pair{p.q, pq}, std::pair{p.k, pk}, std::pair{p.v, pv}}) {
    operand_cpu.bind(leaf, value);
    operand_gpu.bind(leaf, to_gpu(value));
  }
  operand_cpu.run();
  operand_gpu.run();
  auto widened = [](const Tensor& t) {
    Tensor wide = Tensor::empty(t.shape(), DType::f32);
    backend_for(Device::cpu(0)).cast(t, wide);
    return wide.to_vector<float>();
  };
  check_close(widened(to_host(operand_gpu.output(operand))), widened(operand_cpu.output(operand)), 2e-2, 1.2e-2);
}

#endif
