// Every op's sharding rule, case by case: each case of the op table
// (tests/backends/op_cases.hpp), its gradients included, split over devices
// along every dimension of every leaf that divides, or given as partial sums,
// computes what it computes on one device. The rules live with the ops (engine/graph/ops/); the
// partitioner interprets them.
#include <doctest/doctest.h>

#include <map>
#include <set>
#include <string>

#include "backends/registry.hpp"
#include "distribution/distribution.hpp"
#include "distribution/shard_copy.hpp"
#include "distribution/spmd_program.hpp"
#include "engine/graph/op_rules.hpp"
#include "tests/backends/op_cases.hpp"

using namespace tessera;
using namespace tessera::test;

namespace {

bool is_variable(const Graph& g, ValueId v) { return g.node(g.value(v).producer).kind == OpKind::variable; }

// The case's outputs, then each updated variable's blocks (device by device),
// with its leaves split as `shardings` say over `runtime`'s mesh. `split_ops`
// collects the op kinds that met an operand split or a partial sum;
// `variables_split` receives how the variables were split (an optimizer's
// state follows its parameter).
std::vector<std::vector<float>> run_split(Run& r, SpmdRuntime& runtime, const std::map<ValueId, Sharding>& shardings,
                                          std::set<OpKind>& split_ops, std::map<ValueId, Sharding>& variables_split) {
  const Graph& g = r.b.g;
  SpmdProgram program(g, r.outputs, runtime, shardings);
  for (ValueId v : r.b.updated) variables_split[v] = program.sharding(v);
  for (NodeId n = 0; n < g.node_count(); ++n)
    for (ValueId v : g.node(n).inputs) {
      const Sharding& s = program.sharding(v);
      if (s.partial != 0 || s.axes_used() != 0) split_ops.insert(g.node(n).kind);
    }
  const DeviceMesh& mesh = runtime.mesh();
  std::map<ValueId, std::vector<Tensor>> variables;
  // A partial sum over the line's two devices: random addends that sum to the value.
  auto bind = [&](ValueId id, const Tensor& value) {
    auto s = shardings.find(id);
    if (s == shardings.end() || s->second.partial == 0) return program.bind(id, value);
    Tensor first = random_tensor(value.shape(), 77, -1.0f, 1.0f), second = Tensor::empty(value.shape(), value.dtype());
    backend_for(Device::cpu(0)).binary(BinaryOp::sub, value, first, second);
    program.bind_blocks(id, {first, second});
  };
  for (const auto& [id, value] : r.b.leaves) {
    if (!is_variable(g, id)) {
      bind(id, value);
      continue;
    }
    auto& blocks = variables[id];  // bound as blocks this test keeps: the updates write them
    for (int rank = 0; rank < static_cast<int>(mesh.size()); ++rank)
      blocks.push_back(extract_block(value, program.sharding(id), mesh, rank, mesh.devices()[static_cast<std::size_t>(rank)]));
    program.bind_blocks(id, blocks);
  }
  if (r.probe >= 0) bind(r.probe, probe_value(r));
  program.set_update_step(1, 0.0f);
  program.run();
  std::vector<std::vector<float>> results;
  for (ValueId v : r.outputs) results.push_back(program.output(v).to_vector<float>());
  for (ValueId v : r.b.updated)
    for (const Tensor& block : variables.at(v)) results.push_back(block.to_vector<float>());
  return results;
}

// One device's results in run_split's order: updated variables as the
// blocks `variables_split` gives each device.
std::vector<std::vector<float>> single_device(Run& r, const DeviceMesh& mesh,
                                              const std::map<ValueId, Sharding>& variables_split) {
  auto whole = run_on(r, Device::cpu(0));
  std::vector<std::vector<float>> results(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(r.outputs.size()));
  for (std::size_t i = 0; i < r.b.updated.size(); ++i) {
    const ValueId v = r.b.updated[i];
    const Tensor updated = Tensor::from_vector(whole[r.outputs.size() + i], r.b.g.shape(v));
    const Sharding& split = variables_split.at(v);
    for (int rank = 0; rank < static_cast<int>(mesh.size()); ++rank)
      results.push_back(extract_block(updated, split, mesh, rank, Device::cpu(0)).to_vector<float>());
  }
  return results;
}

// The leaves of a built case that a layout may split: all but an optimizer's
// state (split as its parameter is), and the probe.
std::vector<ValueId> splittable_leaves(const Run& r) {
  const Graph& g = r.b.g;
  std::set<ValueId> state;
  for (NodeId n = 0; n < g.node_count(); ++n) {
    const Node& node = g.node(n);
    if (op_info(node.kind).arity == 0) continue;
    const int first = op_rules(node.kind).shard(g, node).optimizer_state_from;
    for (std::size_t i = first < 0 ? node.inputs.size() : static_cast<std::size_t>(first); i < node.inputs.size(); ++i)
      state.insert(node.inputs[i]);
  }
  std::vector<ValueId> leaves;
  for (const auto& [id, value] : r.b.leaves)
    if (!state.contains(id)) leaves.push_back(id);
  if (r.probe >= 0) leaves.push_back(r.probe);
  return leaves;
}

}  // namespace

TEST_CASE("op table: every case split over devices computes what one device computes") {
  set_cpu_device_count(4, 1);
  DeviceMesh line({2}, {"x"}, cpu_devices(2));
  DeviceMesh grid({2, 2}, {"x", "y"}, cpu_devices(4));
  DataParallel on_line(line), on_grid(grid);
  SpmdRuntime line_runtime(on_line), grid_runtime(on_grid);
  std::set<OpKind> split_ops, single_ops;
  int configurations = 0;
  for (const OpCase& c : op_cases()) {
    auto r = build(c, DType::f32, DType::f32, /*with_grads=*/true);
    const Graph& g = r->b.g;
    for (NodeId n = 0; n < g.node_count(); ++n)
      if (op_info(g.node(n).kind).arity != 0) single_ops.insert(g.node(n).kind);
    auto check = [&](SpmdRuntime& runtime, const std::map<ValueId, Sharding>& shardings, const std::string& how) {
      INFO("case " << c.name << ", split " << how);
      std::map<ValueId, Sharding> variables_split;
      auto actual = run_split(*r, runtime, shardings, split_ops, variables_split);
      check_same(actual, single_device(*r, runtime.mesh(), variables_split), 1e-4, 1e-5);
      ++configurations;
    };
    std::map<ValueId, Sharding> first_even, two_axes;  // all leaves at once
    for (ValueId leaf : splittable_leaves(*r)) {
      const Shape shape = g.shape(leaf);
      std::vector<int> even;
      for (int d = 0; d < shape.rank(); ++d)
        if (shape[d] % 2 == 0) even.push_back(d);
      for (int d : even) {  // one dimension of one leaf over two devices
        Sharding s = Sharding::replicated(shape.rank());
        s.dims[static_cast<std::size_t>(d)] = 0;
        check(line_runtime, {{leaf, s}}, "'" + g.value(leaf).name + "' dimension " + std::to_string(d));
        if (first_even.empty() || !first_even.contains(leaf)) first_even[leaf] = s;
      }
      if (even.size() >= 2) {  // its first and last even dimensions over both axes of a 2x2 grid
        Sharding s = Sharding::replicated(shape.rank());
        s.dims[static_cast<std::size_t>(even.front())] = 0;
        s.dims[static_cast<std::size_t>(even.back())] = 1;
        two_axes[leaf] = s;
      } else if (even.size() == 1) {
        two_axes[leaf] = first_even[leaf];
      }
    }
    if (first_even.size() > 1) check(line_runtime, first_even, "every leaf along its first even dimension");
    // Operands that are partial sums (as a split contraction leaves them):
    // only an op linear in them may keep them unsummed.
    std::map<ValueId, Sharding> all_partial;
    for (ValueId leaf : splittable_leaves(*r)) {
      if (!is_floating(g.dtype(leaf)) || is_variable(g, leaf)) continue;
      Sharding s = Sharding::replicated(g.shape(leaf).rank());
      s.partial = 1u;  // over the line's axis
      check(line_runtime, {{leaf, s}}, "'" + g.value(leaf).name + "' as a partial sum");
      all_partial[leaf] = s;
    }
    if (all_partial.size() > 1) check(line_runtime, all_partial, "every input as a partial sum");
    if (!two_axes.empty()) check(grid_runtime, two_axes, "every leaf over a 2x2 grid");
  }
  set_cpu_device_count(1);
  // Every op a single-device graph holds, leaves aside, met split operands somewhere.
  for (OpKind kind : single_ops) {
    INFO("op " << name(kind) << " never met a split operand");
    CHECK(split_ops.contains(kind));
  }
  MESSAGE(configurations << " split configurations over " << single_ops.size() << " op kinds");
}
