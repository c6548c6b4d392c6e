#include "distribution/partitioner.hpp"

#include <algorithm>
#include <numeric>
#include <set>
#include <string>

#include "engine/core/error.hpp"
#include "engine/graph/op_rules.hpp"

namespace tessera {
namespace {

constexpr int kNone = Sharding::kNone;
using Mask = std::uint32_t;
Mask bit(int axis) { return axis == kNone ? 0u : 1u << axis; }

// What a rule decides for one node: the shardings its operands must have, the
// shardings of its results.
struct Decision {
  std::vector<Sharding> operands;
  std::vector<Sharding> results;
  double rescale = 1.0;  // a mean over split dimensions: local means times this add up to the mean
};

class Partitioner {
 public:
  Partitioner(const Graph& global, const DeviceMesh& mesh, int zero_axis) : g_(global), mesh_(mesh), zero_axis_(zero_axis) {
    p_.local_of.assign(static_cast<std::size_t>(g_.value_count()), -1);
    p_.sharding.resize(static_cast<std::size_t>(g_.value_count()));
  }

  Partition run(const std::vector<ValueId>& outputs, std::map<ValueId, Sharding> leaves,
                const std::map<ValueId, Sharding>& constraints) {
    follow_parameters(leaves);
    for (NodeId n = 0; n < g_.node_count(); ++n)
      if (g_.node(n).kind == OpKind::cache_write) cache_rows_.try_emplace(g_.node(n).inputs[0], g_.node(n).inputs[1]);
    for (NodeId n = 0; n < g_.node_count(); ++n) {
      const Node& node = g_.node(n);
      const bool leaf = op_info(node.kind).arity == 0;  // input, variable, fill
      if (leaf) {
        // A leaf's local value is what callers bind: a constraint on it is its sharding.
        if (auto c = constraints.find(node.outputs[0]); c != constraints.end() && node.kind == OpKind::input)
          leaves[node.outputs[0]] = c->second;
        emit_leaf(node, leaves);
        continue;
      }
      const ShardingRule rule = rule_of(g_, node);
      if (rule.optimizer_state_from >= 0 && zero_params_.contains(node.inputs[0]))
        emit_zero_update(node);
      else if (stays_split(node, rule))
        emit_split_expansion(node, rule);
      else
        emit(node, rule, decide(node, rule));
      for (ValueId v : node.outputs)
        if (auto c = constraints.find(v); c != constraints.end()) {
          Sharding want = clean(c->second);
          check_fits(v, want);
          p_.local_of[v] = redistribute(v, want);
          p_.sharding[v] = want;
        }
    }
    for (ValueId v : outputs) p_.outputs.push_back(redistribute(v, Sharding::replicated(g_.shape(v).rank())));
    return std::move(p_);
  }

 private:
  std::map<ValueId, ValueId> cache_rows_;  // a cache_write's cache -> its rows (the first write's)

  std::int64_t axis_size(int axis) const { return mesh_.shape()[static_cast<std::size_t>(axis)]; }
  const Sharding& current(ValueId v) const { return p_.sharding[static_cast<std::size_t>(v)]; }
  Shape local_shape(ValueId v, const Sharding& s) const { return s.local_shape(g_.shape(v), mesh_); }

  // Axes of size 1 split nothing and sum nothing.
  Sharding clean(Sharding s) const {
    for (int& a : s.dims)
      if (a != kNone && axis_size(a) == 1) a = kNone;
    for (int a = 0; a < mesh_.rank(); ++a)
      if (axis_size(a) == 1) s.partial &= ~bit(a);
    return s;
  }

  std::string label(ValueId v) const {
    const std::string& name = g_.value(v).name;
    return name.empty() ? "value %" + std::to_string(v) : "'" + name + "'";
  }

  void check_fits(ValueId v, const Sharding& s) const {
    const Shape shape = g_.shape(v);
    if (s.rank() != shape.rank())
      throw LayoutError(label(v) + " of shape " + shape.str() + " has rank " + std::to_string(shape.rank()) +
                        " but its layout " + s.str(mesh_) + " has rank " + std::to_string(s.rank()));
    Mask used = 0;
    for (int d = 0; d < s.rank(); ++d) {
      int a = s.dims[static_cast<std::size_t>(d)];
      if (a == kNone) continue;
      const std::string& axis = mesh_.axis_names()[static_cast<std::size_t>(a)];
      if (used & bit(a)) throw LayoutError(label(v) + ": mesh axis '" + axis + "' is used twice in " + s.str(mesh_));
      used |= bit(a);
      if (shape[d] % axis_size(a) != 0)
        throw LayoutError(label(v) + " of shape " + shape.str() + ": dimension " + std::to_string(d) + " of size " +
                          std::to_string(shape[d]) + " does not divide over mesh axis '" + axis + "' of size " +
                          std::to_string(axis_size(a)));
    }
  }

  // An optimizer's state (velocity, moments) is split like its parameter: the
  // update writes both in place, so they must be split alike.
  void follow_parameters(std::map<ValueId, Sharding>& leaves) {
    for (NodeId n = 0; n < g_.node_count(); ++n) {
      const Node& node = g_.node(n);
      if (op_rules(node.kind).shard == nullptr) continue;  // leaves; an op without a rule fails where it is emitted
      const int first_state = rule_of(g_, node).optimizer_state_from;
      if (first_state < 0) continue;
      auto param = leaves.find(node.inputs[0]);
      Sharding split = clean(param == leaves.end() ? Sharding::replicated(g_.shape(node.inputs[0]).rank()) : param->second);
      if (zero_eligible(node.inputs[0], split)) {  // the state holds only this device's rows
        zero_params_.insert(node.inputs[0]);
        split.dims[0] = zero_axis_;
      }
      for (auto i = static_cast<std::size_t>(first_state); i < node.inputs.size(); ++i) {
        auto [state, added] = leaves.try_emplace(node.inputs[i], split);
        if (!added && !(clean(state->second) == clean(split)))
          throw LayoutError(label(node.inputs[i]) + " is split as " + state->second.str(mesh_) + " but its parameter " +
                            label(node.inputs[0]) + " as " + split.str(mesh_) +
                            "; an optimizer's state must be split like its parameter");
      }
    }
  }

  // ZeRO-1 applies to a parameter whose rows are whole and divide over the
  // zero axis, which it does not use otherwise.
  bool zero_eligible(ValueId param, const Sharding& s) const {
    if (zero_axis_ == kNone || axis_size(zero_axis_) == 1 || s.rank() == 0) return false;
    return s.dims[0] == kNone && !(s.axes_used() & bit(zero_axis_)) && g_.shape(param)[0] % axis_size(zero_axis_) == 0;
  }

  // A ZeRO-1 update: each device reduce-scatters the gradient to its rows,
  // updates those rows of the parameter (a view into it) with its block of
  // the state, and all-gathers the rows back into every copy, in place.
  void emit_zero_update(const Node& node) {
    const ValueId param = node.inputs[0];
    Sharding rows = current(param);
    rows.dims[0] = zero_axis_;
    OpAttrs view_attrs;
    view_attrs.mesh_axes = bit(zero_axis_);
    const ValueId whole = p_.local_of[param];
    NodeId view_node = p_.local.add_node(OpKind::block_view, {whole}, view_attrs, {{local_shape(param, rows), g_.dtype(param)}});
    std::vector<ValueId> inputs{p_.local.node(view_node).outputs[0]};
    for (std::size_t i = 1; i < node.inputs.size(); ++i) inputs.push_back(redistribute(node.inputs[i], rows));
    p_.local.add_node(node.kind, inputs, node.attrs, {});
    p_.local.add_node(OpKind::all_gather_into, {inputs[0], whole}, view_attrs, {});
    // What is gathered is this device's copy of the parameter (a block of it when another axis splits it).
    const std::int64_t bytes = p_.local.shape(whole).numel() * static_cast<std::int64_t>(dtype_size(g_.dtype(param)));
    p_.collectives.push_back({OpKind::all_gather_into, bit(zero_axis_), bytes, param, inputs[0]});
  }

  // An op with a split expansion whose operand 0 is split (not a partial sum)
  // along the rule's axis is built from local ops and all-reduces over that
  // axis instead of gathering it (softmax over a vocabulary split).
  bool stays_split(const Node& node, const ShardingRule& rule) const {
    if (rule.split_expansion == nullptr) return false;
    const Sharding& x = current(node.inputs[0]);
    return x.partial == 0 && x.dims[static_cast<std::size_t>(rule.split_axis)] != kNone;
  }

  void emit_split_expansion(const Node& node, const ShardingRule& rule) {
    Graph& l = p_.local;
    const Sharding s = current(node.inputs[0]);
    const int a = s.dims[static_cast<std::size_t>(rule.split_axis)];
    const ValueId global_out = node.outputs[0];
    std::vector<ValueId> inputs;
    for (ValueId v : node.inputs) inputs.push_back(redistribute(v, s));
    const AcrossSplit across = [&](ValueId local_partial, ReduceOp op) {
      return collective(OpKind::all_reduce, local_partial, bit(a), 0, l.shape(local_partial), l.dtype(local_partial),
                        global_out, kNone, op);
    };
    p_.local_of[global_out] = rule.split_expansion(l, node, inputs, across);
    p_.sharding[global_out] = s;
  }

  // A KV cache without a layout of its own is split as the rows written into
  // it (traced before it) are, its sequence dimension whole: the heads of a
  // tensor-parallel attention keep their keys and values on their devices.
  Sharding cache_sharding(ValueId rows) const {
    Sharding s = current(rows);
    s.partial = 0;
    s.dims[2] = kNone;
    return clean(s);
  }

  void emit_leaf(const Node& node, const std::map<ValueId, Sharding>& leaves) {
    ValueId v = node.outputs[0];
    const Value& value = g_.value(v);
    Sharding s = Sharding::replicated(value.shape.rank());
    if (auto it = leaves.find(v); it != leaves.end() && node.kind != OpKind::fill) s = clean(it->second);
    else if (auto rows = cache_rows_.find(v); rows != cache_rows_.end() && p_.local_of[rows->second] >= 0)
      s = cache_sharding(rows->second);
    check_fits(v, s);
    Shape shape = local_shape(v, s);
    ValueId local;
    if (node.kind == OpKind::input) local = p_.local.input(value.name, shape, value.dtype);
    else if (node.kind == OpKind::variable) local = p_.local.variable(value.name, shape, value.dtype);
    else local = p_.local.fill(shape, node.attrs.scalar, value.dtype);
    p_.local_of[v] = local;
    p_.sharding[v] = s;
  }

  // ---- redistribution ---------------------------------------------------

  // `dim`: the dimension gathered, scattered or sliced; all_to_all also splits `split_dim`.
  ValueId collective(OpKind kind, ValueId local, Mask axes, int dim, const Shape& shape, DType dtype, ValueId global,
                     int split_dim = kNone, ReduceOp op = ReduceOp::sum) {
    OpAttrs attrs;
    attrs.mesh_axes = axes;
    attrs.axis = dim;
    attrs.reduce = op;
    if (kind == OpKind::all_to_all) attrs.axes = {split_dim, dim};
    NodeId n = p_.local.add_node(kind, {local}, attrs, {{shape, dtype}});
    ValueId out = p_.local.node(n).outputs[0];
    if (kind != OpKind::shard_slice) {
      ValueId counted = kind == OpKind::all_gather ? out : local;
      auto bytes = static_cast<std::int64_t>(p_.local.shape(counted).numel()) * static_cast<std::int64_t>(dtype_size(dtype));
      p_.collectives.push_back({kind, axes, bytes, global, out});
    }
    return out;
  }

  // The local value of global `v` with sharding `to`, inserting collectives
  // after its producer's result as needed (cached: a weight gathered for the
  // forward pass is not gathered again for the backward pass).
  ValueId redistribute(ValueId v, const Sharding& to) {
    Sharding from = current(v);
    if (from == to) return p_.local_of[v];
    auto key = std::make_pair(v, to.str(mesh_));
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;
    if (to.partial & ~from.partial)
      throw GraphError("partitioner: " + label(v) + " cannot become a partial sum (" + from.str(mesh_) + " -> " +
                       to.str(mesh_) + ")");
    const DType dtype = g_.dtype(v);
    const Node& producer = g_.node(g_.value(v).producer);
    ValueId local = p_.local_of[v];
    Sharding s = from;
    // 1. Sum partial sums, scattering straight into a wanted split where one is free.
    Mask reduce = from.partial & ~to.partial;
    for (int a = 0; a < mesh_.rank(); ++a) {
      if (!(reduce & bit(a))) continue;
      int d = to.dim_of_axis(a);
      if (d != kNone && s.dims[static_cast<std::size_t>(d)] == kNone && reduce == bit(a)) {
        Sharding next = s;
        next.dims[static_cast<std::size_t>(d)] = a;
        next.partial &= ~bit(a);
        local = collective(OpKind::reduce_scatter, local, bit(a), d, local_shape(v, next), dtype, v);
        s = next;
        reduce &= ~bit(a);
      }
    }
    if (reduce != 0) {
      s.partial &= ~reduce;
      local = collective(OpKind::all_reduce, local, reduce, 0, local_shape(v, s), dtype, v);
    }
    // 2. Gather the splits that are not wanted; a split that moves to another
    // (whole) dimension is one all_to_all.
    for (int d = 0; d < s.rank(); ++d) {
      int a = s.dims[static_cast<std::size_t>(d)];
      if (a == kNone || a == to.dims[static_cast<std::size_t>(d)]) continue;
      s.dims[static_cast<std::size_t>(d)] = kNone;
      int e = to.dim_of_axis(a);
      if (e != kNone && s.dims[static_cast<std::size_t>(e)] == kNone && s.partial == 0) {
        s.dims[static_cast<std::size_t>(e)] = a;
        local = collective(OpKind::all_to_all, local, bit(a), d, local_shape(v, s), dtype, v, e);
      } else {
        local = collective(OpKind::all_gather, local, bit(a), d, local_shape(v, s), dtype, v);
      }
    }
    // 3. Take this device's block of the wanted splits (a fill is simply made smaller).
    for (int d = 0; d < s.rank(); ++d) {
      int a = to.dims[static_cast<std::size_t>(d)];
      if (a == kNone || s.dims[static_cast<std::size_t>(d)] == a) continue;
      s.dims[static_cast<std::size_t>(d)] = a;
      if (producer.kind == OpKind::fill && s.partial == 0)
        local = p_.local.fill(local_shape(v, s), producer.attrs.scalar, dtype);
      else
        local = collective(OpKind::shard_slice, local, bit(a), d, local_shape(v, s), dtype, v);
    }
    cache_.emplace(key, local);
    return local;
  }

  // ---- rules --------------------------------------------------------------
  // Each op's ShardingRule (engine/graph/sharding_rule.hpp) says what its
  // operands' dimensions are to it; these interpret the rule's forms.

  static ShardingRule rule_of(const Graph& g, const Node& node) {
    const ShardRule shard = op_rules(node.kind).shard;
    if (shard == nullptr) throw GraphError("partitioner: op '" + std::string(name(node.kind)) + "' has no sharding rule");
    return shard(g, node);
  }

  // Shardings of the operands as produced, with partial sums resolved where
  // the op is not linear in them: `linear[i]` says the op is linear in operand
  // i alone (others fixed); `additive` that it is linear in all jointly (add,
  // concat), which needs equal partial sums.
  struct Operands {
    std::vector<Sharding> in;
    Mask partial = 0;  // the result's partial sums
  };
  Operands operand_shardings(const Node& node, const std::vector<bool>& linear, bool additive) const {
    Mask result_partial = 0;
    std::vector<Sharding> in;
    for (ValueId v : node.inputs) in.push_back(current(v));
    if (additive) {
      bool same = std::all_of(in.begin(), in.end(), [&](const Sharding& s) { return s.partial == in[0].partial; });
      if (same) result_partial = in[0].partial;
      else
        for (auto& s : in) s.partial = 0;
      return {in, result_partial};
    }
    // Linear in one operand: at most one partial operand, in a linear slot.
    int partial_operand = -1;
    for (std::size_t i = 0; i < in.size(); ++i) {
      if (in[i].partial == 0) continue;
      if (partial_operand < 0 && i < linear.size() && linear[i]) {
        partial_operand = static_cast<int>(i);
        result_partial = in[i].partial;
      } else {
        in[i].partial = 0;
      }
    }
    return {in, result_partial};
  }

  // A partial sum meeting an operand split along the same axis would force
  // that split to be gathered (the two cannot share the axis); summing the
  // partial operand first is cheaper and keeps Megatron's pattern (in the
  // backward pass: all-reduce dy, then the split weight's products stay local).
  static void sum_colliding_partials(Operands& operands) {
    if (operands.partial == 0) return;
    bool collides = false;
    for (const auto& s : operands.in)
      if (s.partial == 0 && ((s.axes_used() & ~s.partial) & operands.partial)) collides = true;
    if (!collides) return;
    for (auto& s : operands.in) s.partial = 0;
    operands.partial = 0;
  }

  Decision decide(const Node& node, const ShardingRule& rule) const {
    Operands operands = operand_shardings(node, rule.linear, rule.additive);
    switch (rule.form) {
      case ShardingRule::Form::dims:
        return by_dims(node, rule, std::move(operands));
      case ShardingRule::Form::reshape:
        return reshape(node, std::move(operands));
      case ShardingRule::Form::rows:
        return rows(node, rule, std::move(operands));
      case ShardingRule::Form::follow_first: {
        // Operands of another rank (a cache's positions) follow operand 0's rows only.
        const Sharding& first = current(node.inputs[0]);
        std::vector<Sharding> shardings;
        for (ValueId in : node.inputs) {
          if (g_.shape(in).rank() == first.rank()) {
            shardings.push_back(first);
            continue;
          }
          Sharding rows = Sharding::replicated(g_.shape(in).rank());
          if (rows.rank() > 0 && first.rank() > 0) rows.dims[0] = first.dims[0];
          shardings.push_back(rows);
        }
        return Decision{std::move(shardings), {}};
      }
      case ShardingRule::Form::none:
        break;
    }
    throw GraphError("partitioner: op '" + std::string(name(node.kind)) + "' has no sharding rule");
  }

  // Operand dimensions that meet in one result dimension or one summed pair
  // agree on a split (the first member's split that all can take wins; the
  // others slice locally or gather); a split summed pair makes the result a
  // partial sum over that axis; whole dimensions are never split.
  Decision by_dims(const Node& node, const ShardingRule& rule, Operands operands) const {
    sum_colliding_partials(operands);
    auto& in = operands.in;
    const Mask partial = operands.partial;
    const Shape out = g_.shape(node.outputs[0]);
    for (std::size_t k = 0; k < rule.roles.size(); ++k)
      for (std::size_t d = 0; d < rule.roles[k].size(); ++d)
        if (rule.roles[k][d].kind == DimRole::whole) in[k].dims[d] = kNone;
    // Each group: the operand dimensions of one result dimension or summed pair.
    struct Member { std::size_t operand, dim; };
    const int groups = out.rank() + rule.summed;
    std::vector<std::vector<Member>> members(static_cast<std::size_t>(groups));
    for (std::size_t k = 0; k < rule.roles.size(); ++k)
      for (std::size_t d = 0; d < rule.roles[k].size(); ++d) {
        const DimRole& role = rule.roles[k][d];
        if (role.kind == DimRole::whole) continue;
        int group = role.kind == DimRole::result ? role.index : out.rank() + role.index;
        members[static_cast<std::size_t>(group)].push_back({k, d});
      }
    Decision decision;
    Mask used = partial;
    Sharding result = Sharding::replicated(out.rank());
    // Summed pairs first: a split contraction costs one reduction of the result,
    // cheaper than gathering an operand (unless the rule says otherwise).
    std::vector<int> order;
    for (int gi = out.rank(); gi < groups; ++gi) order.push_back(gi);
    for (int gi = 0; gi < out.rank(); ++gi) order.push_back(gi);
    if (rule.results_first) std::rotate(order.begin(), order.begin() + rule.summed, order.end());
    for (int gi : order) {
      const auto& group = members[static_cast<std::size_t>(gi)];
      // A split every member can take: it has it there already, or does not use the axis.
      auto acceptable = [&](int a) {
        if (used & bit(a)) return false;
        for (const Member& m : group) {
          const Sharding& s = in[m.operand];
          if (s.dims[m.dim] != a && (s.axes_used() & bit(a))) return false;
        }
        return true;
      };
      int chosen = kNone;
      for (const Member& m : group) {
        int a = in[m.operand].dims[m.dim];
        if (a != kNone && acceptable(a)) {
          chosen = a;
          break;
        }
      }
      for (const Member& m : group) in[m.operand].dims[m.dim] = chosen;
      used |= bit(chosen);
      if (gi < out.rank()) {
        result.dims[static_cast<std::size_t>(gi)] = chosen;
      } else if (chosen != kNone) {
        result.partial |= bit(chosen);
        if (rule.mean) decision.rescale /= static_cast<double>(axis_size(chosen));
      }
    }
    result.partial |= partial;
    decision.operands = std::move(in);
    decision.results = {result};
    // Later results take the first's splits; a partial sum would need each
    // result's own linearity, which no rule with later results says yet.
    if (!rule.later_results.empty() && result.partial != 0)
      throw GraphError("partitioner: op '" + std::string(name(node.kind)) +
                       "' would pass a partial sum to its later results, which its rule cannot say");
    for (const std::vector<int>& dims : rule.later_results) {
      Sharding later = Sharding::replicated(static_cast<int>(dims.size()));
      for (std::size_t d = 0; d < dims.size(); ++d)
        if (dims[d] >= 0) later.dims[d] = result.dims[static_cast<std::size_t>(dims[d])];
      decision.results.push_back(later);
    }
    return decision;
  }

  // A split dimension carries through a reshape when it starts at the same
  // element offset (the product of the dimensions before it) in both shapes and
  // the new dimension divides by the axis: then every device's block is the
  // same run of elements.
  Decision reshape(const Node& node, Operands operands) const {
    auto& in = operands.in;
    const Shape from = g_.shape(node.inputs[0]), to = g_.shape(node.outputs[0]);
    Sharding result = Sharding::replicated(to.rank());
    result.partial = operands.partial;
    for (int d = 0; d < from.rank(); ++d) {
      int a = in[0].dims[static_cast<std::size_t>(d)];
      if (a == kNone) continue;
      std::int64_t before = 1;
      for (int i = 0; i < d; ++i) before *= from[i];
      int target = kNone;
      std::int64_t prefix = 1;
      for (int e = 0; e < to.rank(); ++e) {
        if (prefix == before && to[e] % axis_size(a) == 0 && to[e] > 1) {
          target = e;
          break;
        }
        prefix *= to[e];
      }
      if (target == kNone) in[0].dims[static_cast<std::size_t>(d)] = kNone;
      else result.dims[static_cast<std::size_t>(target)] = a;
    }
    return Decision{in, {result}};
  }

  // A normalization of rows: operand 0 keeps only a split of its rows
  // (dimension 0 of a matrix or more); values per row follow that split;
  // values per feature are whole, and summed over split rows a partial sum.
  // A block operand that is a partial sum over the rows' axis cannot be one
  // (the axis splits its rows): it is reduce-scattered into the split instead.
  Decision rows(const Node& node, const ShardingRule& rule, Operands operands) const {
    using Part = ShardingRule::RowPart;
    Sharding x = operands.in[0];
    const Shape xs = g_.shape(node.inputs[0]);
    for (int d = xs.rank() >= 2 ? 1 : 0; d < xs.rank(); ++d) x.dims[static_cast<std::size_t>(d)] = kNone;
    const int rows_axis = xs.rank() >= 2 ? x.dims[0] : kNone;
    const Mask partial = operands.partial & ~bit(rows_axis);
    auto sharding = [&](Part part, bool summed) {
      if (part == Part::block) {
        Sharding s = x;
        s.partial = summed ? partial : 0;
        return s;
      }
      Sharding s = Sharding::replicated(1);
      if (part == Part::per_row) s.dims[0] = rows_axis;
      if (summed) s.partial = partial | (part == Part::per_feature_sum ? bit(rows_axis) : 0);
      return s;
    };
    Decision decision;
    for (std::size_t i = 0; i < rule.operand_parts.size(); ++i)
      decision.operands.push_back(sharding(rule.operand_parts[i], i < rule.linear.size() && rule.linear[i]));
    for (Part part : rule.result_parts) decision.results.push_back(sharding(part, true));
    return decision;
  }

  // ---- emission -------------------------------------------------------------

  // Each mesh axis splits one dimension or marks a partial sum, never both:
  // a rule breaking that would compute wrong values, so it is an error here.
  void check_valid(const Node& node, const Sharding& s) const {
    Mask seen = s.partial;
    for (int a : s.dims) {
      if (a != kNone && (seen & bit(a)))
        throw GraphError("partitioner: the rule of '" + std::string(name(node.kind)) + "' gave the invalid sharding " +
                         s.str(mesh_) + " (a mesh axis used twice)");
      seen |= bit(a);
    }
  }

  void emit(const Node& node, const ShardingRule& rule, Decision decision) {
    for (const auto& s : decision.operands) check_valid(node, s);
    for (const auto& s : decision.results) check_valid(node, s);
    std::vector<ValueId> inputs;
    for (std::size_t i = 0; i < node.inputs.size(); ++i) {
      ValueId v = node.inputs[i];
      inputs.push_back(redistribute(v, clean(decision.operands[i])));
    }
    OpAttrs attrs = node.attrs;
    std::vector<std::pair<Shape, DType>> types;
    for (std::size_t i = 0; i < node.outputs.size(); ++i) {
      decision.results[i] = clean(decision.results[i]);
      types.emplace_back(local_shape(node.outputs[i], decision.results[i]), g_.dtype(node.outputs[i]));
    }
    // Attributes that state the result's shape state the local one.
    if (!node.outputs.empty() && attrs.shape == g_.shape(node.outputs[0]) && attrs.shape.rank() > 0)
      attrs.shape = types[0].first;
    // The run rule learns which axis splits a block it needs the offset of.
    if (const auto& at = rule.block_axis) {
      const Sharding& s = at->result ? decision.results[static_cast<std::size_t>(at->index)]
                                     : clean(decision.operands[static_cast<std::size_t>(at->index)]);
      attrs.mesh_axes = bit(s.dims[static_cast<std::size_t>(at->dim)]);
    }
    NodeId n = p_.local.add_node(node.kind, inputs, attrs, types);
    for (std::size_t i = 0; i < node.outputs.size(); ++i) {
      ValueId out = p_.local.node(n).outputs[i];
      if (i == 0 && decision.rescale != 1.0)
        out = p_.local.mul(out, p_.local.fill(Shape{}, decision.rescale, types[0].second));
      p_.local_of[node.outputs[i]] = out;
      p_.sharding[node.outputs[i]] = decision.results[i];
    }
  }

  const Graph& g_;
  const DeviceMesh& mesh_;
  int zero_axis_;                  // ZeRO-1: the axis splitting optimizer state and updates, or kNone
  std::set<ValueId> zero_params_;  // parameters updated that way
  Partition p_;
  std::map<std::pair<ValueId, std::string>, ValueId> cache_;
};

}  // namespace

std::string_view collective_name(OpKind kind) { return kind == OpKind::all_gather_into ? "all_gather" : name(kind); }

Partition partition(const Graph& global, const std::vector<ValueId>& outputs, const DeviceMesh& mesh,
                    const std::map<ValueId, Sharding>& leaf_shardings, const std::map<ValueId, Sharding>& constraints,
                    int zero_axis) {
  return Partitioner(global, mesh, zero_axis).run(outputs, leaf_shardings, constraints);
}

}  // namespace tessera
