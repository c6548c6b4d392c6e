// The partitioner's plans: which collectives each sharding needs. The
// numerical equivalence of every plan with one device is
// sharded_training_test.cpp's; these check that the plans are the ones the
// layouts call for (no more communication than Megatron, FSDP or data
// parallel need).
#include <doctest/doctest.h>

#include "backends/registry.hpp"
#include <set>

#include "distribution/auto_tp.hpp"
#include "distribution/spmd_program.hpp"
#include "engine/config/config.hpp"
#include "engine/graph/autodiff.hpp"
#include "engine/run/trainer.hpp"
#include "layers/registry.hpp"
#include "tests/test_util.hpp"
#include "tests/source_tree.hpp"

using namespace tessera;

namespace {

const std::optional<std::string> none;

// "kind axes: count; ..." of the MLP's training step (batch 16, SGD) on `shape`.
std::string mlp_plan(std::vector<std::int64_t> shape, const LayoutMap& map,
                                    std::vector<std::string>* gathered = nullptr) {
  const int devices = static_cast<int>(shape[0] * shape[1]);
  set_cpu_device_count(devices, 1);
  Model model = Model::from_config(ConfigNode::load_file(test::source_path("models/mlp.yaml"))["model"]);
  TrainingSpec spec = parse_training(ConfigNode::parse(
      "training: {loss: {type: sparse_categorical_crossentropy, from_logits: true}, optimizer: sgd, batch_size: 16}")["training"]);
  DeviceMesh mesh(shape, {"batch", "model"}, cpu_devices(devices));
  ModelParallel distribution(mesh, map, "batch");
  VariableStore store;
  Trainer trainer(model, spec, store, distribution);
  const SpmdProgram& program = *trainer.sharded_program(16);
  std::map<std::string, int> counts;
  for (const auto& c : program.collectives()) {
    ++counts[std::string(name(c.kind)) + " " + axes_label(c.mesh_axes, mesh)];
    if (gathered && c.kind == OpKind::all_gather) gathered->push_back(program.global().value(c.value).name);
  }
  set_cpu_device_count(1);
  std::string text;
  for (const auto& [key, n] : counts) text += (text.empty() ? "" : "; ") + key + ": " + std::to_string(n);
  return text;
}

}  // namespace

TEST_CASE("data parallel: one all-reduce per gradient, plus the loss") {
  // No metrics: the logits are never gathered.
  CHECK(mlp_plan({4, 1}, {}) == "all_reduce batch: 7");
}

TEST_CASE("Megatron column- then row-parallel: one model-axis all-reduce, after the row-parallel matmul") {
  LayoutMap map;
  map.add("dense/kernel", TensorLayout({none, "model"}));
  map.add("dense/bias", TensorLayout({"model"}));
  map.add("dense_1/kernel", TensorLayout({"model", none}));
  // The input needs no gradient, so the column-parallel layer's backward
  // all-reduce (Megatron's f) is not needed either.
  CHECK(mlp_plan({1, 2}, map) == "all_reduce model: 1");
  // With a batch axis too: the gradients of the split variables are reduced
  // over `batch` only; the replicated last layer's too.
  CHECK(mlp_plan({2, 2}, map) == "all_reduce batch: 7; all_reduce model: 1");
}

TEST_CASE("fully sharded: weights all-gathered once per step, their gradients reduce-scattered") {
  LayoutMap map;
  map.add("dense(_1)?/kernel", TensorLayout({"batch", none}));
  std::vector<std::string> gathered;
  // Two kernels gathered and their gradients scattered; the biases', the
  // last layer's and the loss reduced.
  CHECK(mlp_plan({4, 1}, map, &gathered) == "all_gather batch: 2; all_reduce batch: 5; reduce_scatter batch: 2");
  // The forward's gathered weight is reused by the backward pass.
  CHECK(std::count(gathered.begin(), gathered.end(), "mlp/dense/kernel") == 1);
  CHECK(std::count(gathered.begin(), gathered.end(), "mlp/dense_1/kernel") == 1);
}

TEST_CASE("an activation layout redistributes the layer's output") {
  LayoutMap map;
  map.add("dense/kernel", TensorLayout({none, "model"}));
  // Gather the column-parallel activations right after the layer (as
  // jax.lax.with_sharding_constraint would); then nothing is row-parallel.
  map.add("dense/output", TensorLayout({none, none}));
  // The gradient then arrives whole and the kernel's gradient is sliced
  // locally; relu's mask reads the gathered output, so the replicated
  // bias's gradient needs no gather of the split pre-activations.
  CHECK(mlp_plan({1, 2}, map) == "all_gather model: 1");
}

TEST_CASE("a sharding that does not fit its value names the variable, dimension, sizes and axis") {
  set_cpu_device_count(3, 1);
  Graph g;
  ValueId w = g.variable("dense/kernel", {8, 4});
  DeviceMesh mesh({3}, {"model"}, cpu_devices(3));
  Sharding bad = Sharding::replicated(2);
  bad.dims[0] = 0;
  CHECK_THROWS_WITH_AS(partition(g, {w}, mesh, {{w, bad}}),
                       "'dense/kernel' of shape [8, 4]: dimension 0 of size 8 does not divide over mesh axis 'model' of size 3",
                       LayoutError);
  set_cpu_device_count(1);
}

TEST_CASE("a split that moves to another dimension is one all_to_all, and computes the same values") {
  set_cpu_device_count(4, 1);
  Graph g;
  ValueId x = g.input("x", {8, 12});
  ValueId y = g.unary(UnaryOp::square, x);
  DeviceMesh mesh({4}, {"batch"}, cpu_devices(4));
  DataParallel distribution(mesh);
  SpmdRuntime runtime(distribution);
  Sharding rows = Sharding::replicated(2), columns = Sharding::replicated(2);
  rows.dims[0] = 0;
  columns.dims[1] = 0;
  SpmdProgram program(g, {y}, runtime, {{x, rows}}, {{y, columns}});
  std::vector<std::string> kinds;
  for (const auto& c : program.collectives()) kinds.emplace_back(name(c.kind));
  // [rows split] -> [columns split] by all_to_all; the output is then gathered.
  CHECK(kinds == std::vector<std::string>{"all_to_all", "all_gather"});
  std::vector<float> values(96);
  for (int i = 0; i < 96; ++i) values[static_cast<std::size_t>(i)] = static_cast<float>(i % 13) - 6.0f;
  program.bind(x, Tensor::from_vector(values, {8, 12}));
  program.run();
  std::vector<float> expected;
  for (float v : values) expected.push_back(v * v);
  CHECK(program.output(y).to_vector<float>() == expected);
  set_cpu_device_count(1);
}

TEST_CASE("layer norm over split rows feeding a split weight gives the single-device gradients") {
  // Rows split along `m`, then a weight split along `m` too: the rules must
  // not let one axis both split the rows and mark dy's partial sums (the
  // partitioner's validity check would throw).
  set_cpu_device_count(2, 1);
  Graph g;
  ValueId x = g.input("x", {4, 8});
  ValueId gamma = g.variable("gamma", {8}), beta = g.variable("beta", {8}), w = g.variable("w", {8, 6});
  ValueId y = g.layer_norm(x, gamma, beta)[0];
  ValueId loss = g.reduce(ReduceOp::sum, g.unary(UnaryOp::square, g.matmul(y, w)), {0, 1});
  auto grads = append_gradients(g, loss, {gamma, beta, w});
  std::vector<ValueId> outputs{loss, grads.at(gamma), grads.at(beta), grads.at(w)};
  const Tensor xs = test::random_tensor({4, 8}, 3), gs = test::random_tensor({8}, 4), bs = test::random_tensor({8}, 5),
               ws = test::random_tensor({8, 6}, 6);
  Executor single(g, outputs);
  single.bind(x, xs), single.bind(gamma, gs), single.bind(beta, bs), single.bind(w, ws);
  single.run();

  DeviceMesh mesh({2}, {"m"}, cpu_devices(2));
  DataParallel distribution(mesh);
  SpmdRuntime runtime(distribution);
  Sharding rows = Sharding::replicated(2), columns = Sharding::replicated(2);
  rows.dims[0] = 0;
  columns.dims[1] = 0;
  SpmdProgram program(g, outputs, runtime, {{x, rows}, {w, columns}});
  program.bind(x, xs), program.bind(gamma, gs), program.bind(beta, bs), program.bind(w, ws);
  program.run();
  for (ValueId v : outputs) {
    INFO("value %" << v);
    test::check_close(program.output(v), single.output(v).to_vector<float>(), 1e-5, 1e-5);
  }
  set_cpu_device_count(1);
}

TEST_CASE("an optimizer state split unlike its parameter is an error naming both") {
  set_cpu_device_count(2, 1);
  Graph g;
  ValueId w = g.variable("w", {4, 2}), grad = g.input("grad", {4, 2}), velocity = g.variable("optimizer/w/momentum", {4, 2});
  g.sgd_update(w, grad, velocity, SgdArgs{});
  DeviceMesh mesh({2}, {"m"}, cpu_devices(2));
  Sharding rows = Sharding::replicated(2);
  rows.dims[0] = 0;
  CHECK_THROWS_WITH_AS(partition(g, {}, mesh, {{w, rows}, {velocity, Sharding::replicated(2)}}),
                       doctest::Contains("'optimizer/w/momentum' is split as [None, None] but its parameter 'w' as [m, None]"),
                       LayoutError);
  set_cpu_device_count(1);
}

TEST_CASE("zero 1: gradients reduce-scattered and parameters all-gathered, no all-reduce of big parameters") {
  set_cpu_device_count(4, 1);
  Model model = Model::from_config(ConfigNode::load_file(test::source_path("models/mlp.yaml"))["model"]);
  TrainingSpec spec = parse_training(ConfigNode::parse(
      "training: {loss: {type: sparse_categorical_crossentropy, from_logits: true}, optimizer: adam, batch_size: 16}")["training"]);
  DataParallel distribution(cpu_devices(4));
  distribution.set_zero(true);
  VariableStore store;
  Trainer trainer(model, spec, store, distribution);
  std::map<std::string, int> counts;
  for (const auto& c : trainer.sharded_program(16)->collectives()) ++counts[std::string(name(c.kind))];
  // Every parameter's rows divide by 4 except dense_2/bias [10]: it keeps its all-reduce, as does the loss.
  CHECK(counts == std::map<std::string, int>{{"all_gather_into", 5}, {"all_reduce", 2}, {"reduce_scatter", 5}});
  // The Adam moments hold a quarter of the rows.
  for (ValueId v : trainer.sharded_program(16)->global().variables()) {
    const Value& value = trainer.sharded_program(16)->global().value(v);
    if (value.name == "optimizer/mlp/dense/kernel/m")
      CHECK(trainer.sharded_program(16)->sharding(v).local_shape(value.shape, distribution.mesh()) == Shape{196, 1024});
  }
  set_cpu_device_count(1);
}

TEST_CASE("softmax over a split dimension all-reduces its max and sum instead of gathering") {
  set_cpu_device_count(4, 1);
  for (bool log : {false, true}) {
    INFO((log ? "log-softmax" : "softmax"));
    Graph g;
    ValueId x = g.input("x", {3, 8});
    ValueId w = g.variable("w", {3, 8});
    ValueId logits = g.mul(x, w);
    ValueId y = g.softmax(logits, -1, log);
    ValueId loss = g.reduce(ReduceOp::sum, g.mul(y, y), {0, 1});
    auto grads = append_gradients(g, loss, {w});
    std::vector<ValueId> outputs{y, grads.at(w)};
    const Tensor xs = test::random_tensor({3, 8}, 7, -3, 3), ws = test::random_tensor({3, 8}, 8);
    Executor single(g, outputs);
    single.bind(x, xs), single.bind(w, ws);
    single.run();
    DeviceMesh mesh({4}, {"model"}, cpu_devices(4));
    DataParallel distribution(mesh);
    SpmdRuntime runtime(distribution);
    Sharding columns = Sharding::replicated(2);
    columns.dims[1] = 0;
    SpmdProgram program(g, outputs, runtime, {{x, columns}, {w, columns}});
    // Nothing gathers the softmax's input; only the requested outputs (y, dw) are gathered at the end.
    int gathers = 0;
    for (const auto& c : program.collectives()) {
      CHECK(c.value != logits);
      gathers += c.kind == OpKind::all_gather;
    }
    CHECK(gathers == 2);
    program.bind(x, xs), program.bind(w, ws);
    program.run();
    test::check_close(program.output(y), single.output(y).to_vector<float>(), 1e-5, 1e-6);
    test::check_close(program.output(grads.at(w)), single.output(grads.at(w)).to_vector<float>(), 1e-4, 1e-6);
  }
  set_cpu_device_count(1);
}

TEST_CASE("AutoTP's vocabulary-parallel head: training never gathers the logits") {
  set_cpu_device_count(4, 1);
  Model model = Model::from_config(ConfigNode::load_file(test::source_path("models/gpt.yaml"))["model"]);
  TrainingSpec spec = parse_training(ConfigNode::parse(
      "training: {loss: {type: sparse_categorical_crossentropy, from_logits: true}, optimizer: sgd, batch_size: 8}")["training"]);
  DeviceMesh mesh({1, 4}, {"batch", "model"}, cpu_devices(4));
  VariableStore store;
  model.build(store, 0);
  ModelParallel distribution(mesh, plan_auto_tp(model, store, mesh, "model").layout_map(), "batch");
  Trainer trainer(model, spec, store, distribution);
  const SpmdProgram& program = *trainer.sharded_program(8);
  // The loss's log-softmax: its input is the logits, split over the vocabulary.
  const Graph& g = program.global();
  std::set<ValueId> logits;
  for (NodeId n = 0; n < g.node_count(); ++n)
    if ((g.node(n).kind == OpKind::softmax || g.node(n).kind == OpKind::softmax_grad) && g.node(n).attrs.log)
      for (ValueId v : g.node(n).inputs) logits.insert(v);
  REQUIRE(!logits.empty());
  CHECK(program.sharding(*logits.begin()).dims[2] == 1);  // [batch, time, vocab] split over `model`
  // What moves for them is a max or a sum per row ([batch, time, 1]), not the logits.
  for (const auto& c : program.collectives())
    if (logits.contains(c.value)) CHECK(c.bytes == 8 * 128 * 4);
  set_cpu_device_count(1);
}

namespace {

// A linear layer of its own with variables AutoTP has never heard of: AutoTP
// must split them from the layer's declaration alone.
class ScaledLinear final : public Layer {
 public:
  ScaledLinear(const std::string& name, std::int64_t units) : Layer("ScaledLinear", name), units_(units) {}
  ValueId call(LayerContext& ctx, const std::vector<ValueId>& inputs) override {
    Shape in = ctx.graph.shape(inputs[0]);
    ValueId w = ctx.variable("weights", {in[in.rank() - 1], units_}, Initializer{}, {"in", "out"});
    return ctx.graph.scale(ctx.graph.matmul(inputs[0], w), 0.5);
  }
  TensorSplit tensor_split() const override {
    return {TensorSplit::Kind::linear, {{{{"weights", "out"}}, "", "units"}, {{{"weights", "in"}}, "", ""}}};
  }

 private:
  std::int64_t units_;
};

}  // namespace

TEST_CASE("AutoTP splits what a layer declares, whatever its variables are called") {
  register_builtin_layers();
  if (!LayerRegistry::instance().contains("ScaledLinear"))
    LayerRegistry::instance().add("ScaledLinear", [](ConfigNode args, const std::string& name) {
      return std::make_unique<ScaledLinear>(name, args["units"].as<std::int64_t>());
    });
  Model model = Model::from_config(ConfigNode::parse(R"(
model:
  name: scaled
  inputs: [{name: x, shape: [8]}]
  layers:
    - {type: ScaledLinear, name: up, units: 16}
    - {type: Activation, activation: relu}
    - {type: ScaledLinear, name: down, units: 6}
)")["model"]);
  VariableStore store;
  model.build(store, 0);
  set_cpu_device_count(2, 1);
  DeviceMesh mesh({1, 2}, {"batch", "model"}, cpu_devices(2));
  AutoTpPlan plan = plan_auto_tp(model, store, mesh, "model");
  CHECK(plan.variables.at("scaled/up/weights") == TensorLayout({none, "model"}));    // column-parallel
  CHECK(plan.variables.at("scaled/down/weights") == TensorLayout({"model", none}));  // row-parallel after the relu
  REQUIRE(plan.layers.size() == 3);
  CHECK(plan.layers[1].rule == "keeps the split");
  set_cpu_device_count(1);
}

TEST_CASE("a KV cache is split as the keys written into it: attending over it gathers nothing") {
  set_cpu_device_count(2, 1);
  Graph g;  // two sequences, one new token each, 2 heads of 3 over 4 features
  ValueId x = g.input("x", {2, 1, 4}), w = g.variable("key/kernel", {4, 6});
  ValueId keys = g.transpose(g.reshape(g.matmul(x, w), {2, 1, 2, 3}), {0, 2, 1, 3});  // [2, 2, 1, 3]
  ValueId cache = g.variable("kv_cache/keys", {2, 2, 5, 3});
  g.cache_write(cache, keys, g.input("positions", {2, 1}, DType::i32));
  ValueId scores = g.matmul(keys, cache, {.transpose_b = true});  // [2, 2, 1, 5]
  DeviceMesh mesh({2}, {"model"}, cpu_devices(2));
  Sharding heads = Sharding::replicated(2);
  heads.dims[1] = 0;  // the kernel column-parallel: each device computes its head's keys
  const Partition p = partition(g, {scores}, mesh, {{w, heads}});
  CHECK(p.sharding[static_cast<std::size_t>(cache)].dims == std::vector<int>{Sharding::kNone, 0, Sharding::kNone, Sharding::kNone});
  std::vector<std::string> kinds;
  for (const auto& c : p.collectives) kinds.emplace_back(name(c.kind));
  CHECK(kinds == std::vector<std::string>{"all_gather"});  // the scores, replicated for the caller only
  set_cpu_device_count(1);
}

TEST_CASE("an activation layout reaches a block's nested attention output, as block_0/attention/output") {
  set_cpu_device_count(2, 1);
  Model model = Model::from_config(ConfigNode::load_file(test::source_path("models/gpt.yaml"))["model"]);
  const auto paths = model.output_paths();
  CHECK(std::find(paths.begin(), paths.end(), "block_0/attention/output") != paths.end());
  {  // a trace hands out the same paths, each with its value
    Graph g;
    VariableStore store;
    std::vector<std::string> traced;
    for (const auto& [path, value] : model.trace(g, 1, false, store, 0).layer_outputs) traced.push_back(path);
    CHECK(traced == paths);
  }
  TrainingSpec spec = parse_training(ConfigNode::parse(
      "training: {loss: {type: sparse_categorical_crossentropy, from_logits: true}, optimizer: sgd, batch_size: 2}")["training"]);
  DeviceMesh mesh({2, 1}, {"batch", "model"}, cpu_devices(2));
  auto batch_gathers = [&](const LayoutMap& map) {
    VariableStore store;
    ModelParallel distribution(mesh, map, "batch");
    Trainer trainer(model, spec, store, distribution);
    int gathers = 0;
    for (const auto& c : trainer.sharded_program(2)->collectives()) gathers += c.kind == OpKind::all_gather ? 1 : 0;
    return gathers;
  };
  LayoutMap whole_attention;  // the attention's output of block 0 gathered over the batch, nothing else
  whole_attention.add("block_0/attention/output", TensorLayout({none, none, none}));
  CHECK(batch_gathers(LayoutMap{}) == 0);
  CHECK(batch_gathers(whole_attention) >= 1);
  set_cpu_device_count(1);
}
