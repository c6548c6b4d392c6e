#include "distribution/auto_tp.hpp"

#include <algorithm>

#include "engine/core/error.hpp"

namespace tessera {
namespace {

class Planner {
 public:
  Planner(const VariableStore& store, const DeviceMesh& mesh, std::string axis)
      : store_(store), axis_(std::move(axis)), n_(mesh.axis_size(axis_)) {}

  AutoTpPlan plan(const Model& model) {
    for (const auto& v : store_.variables())
      if (v.path.rfind("optimizer/", 0) != 0) plan_.variables[v.path] = TensorLayout::replicated(v.shape().rank());
    const auto graph = model.layer_graph();
    split_.assign(graph.size(), false);
    for (std::size_t i = 0; i < graph.size(); ++i) visit(graph, i, i + 1 == graph.size());
    return std::move(plan_);
  }

 private:
  const Variable* find(const std::string& path) const {
    for (const auto& v : store_.variables())
      if (v.path == path) return &v;
    return nullptr;
  }

  // Splits variable `path` along the dimension whose role is `role`; false
  // (and nothing split) when it has no such dimension or the size does not divide.
  bool split(const std::string& path, const std::string& role) {
    const Variable* v = find(path);
    if (v == nullptr) return false;
    auto it = std::find(v->axis_roles.begin(), v->axis_roles.end(), role);
    if (it == v->axis_roles.end()) return false;
    auto d = static_cast<int>(it - v->axis_roles.begin());
    if (v->shape()[d] % n_ != 0) return false;
    std::vector<std::optional<std::string>> axes(static_cast<std::size_t>(v->shape().rank()));
    axes[static_cast<std::size_t>(d)] = axis_;
    plan_.variables[path] = TensorLayout(std::move(axes));
    return true;
  }
  std::int64_t extent(const std::string& path, const std::string& role) const {
    const Variable* v = find(path);
    if (v == nullptr) return 0;
    auto it = std::find(v->axis_roles.begin(), v->axis_roles.end(), role);
    return it == v->axis_roles.end() ? 0 : v->shape()[static_cast<int>(it - v->axis_roles.begin())];
  }

  void rule(const Model::LayerNode& layer, std::string rule, std::string why) {
    plan_.layers.push_back({layer.name, layer.type, std::move(rule), std::move(why)});
  }

  std::string of(std::int64_t size) const {
    return std::to_string(size) + " do not divide over '" + axis_ + "' of size " + std::to_string(n_);
  }

  // Splits every variable of `group` (under the layer's `prefix`) when its
  // first one splits; false, with nothing split, when it does not divide.
  bool split_group(const std::string& prefix, const SplitGroup& group) {
    if (group.splits.empty() || !split(prefix + group.splits[0].variable, group.splits[0].role)) return false;
    for (std::size_t s = 1; s < group.splits.size(); ++s) split(prefix + group.splits[s].variable, group.splits[s].role);
    return true;
  }
  // "units 10 do not divide over 'model' of size 4": why `group` stays whole.
  std::string whole(const std::string& prefix, const SplitGroup& group) const {
    const VariableSplit& first = group.splits[0];
    return group.when_whole + " " + of(extent(prefix + first.variable, first.role));
  }

  void visit(const std::vector<Model::LayerNode>& graph, std::size_t i, bool last) {
    const auto& layer = graph[i];
    const std::string& p = layer.prefix;
    const TensorSplit& declared = layer.split;
    bool input_split = !layer.sources.empty();
    for (int s : layer.sources) input_split = input_split && s >= 0 && split_[static_cast<std::size_t>(s)];
    const std::string source = !layer.sources.empty() && layer.sources[0] >= 0 ? graph[static_cast<std::size_t>(layer.sources[0])].name : "";
    bool out = false;
    using Kind = TensorSplit::Kind;
    if (n_ == 1) {
      rule(layer, "replicated", "the mesh axis '" + axis_ + "' has size 1");
    } else if (declared.kind == Kind::linear) {
      const SplitGroup& column = declared.groups.at(0);
      if (input_split) {
        split_group(p, declared.groups.at(1));
        rule(layer, "row-parallel", "reads the features '" + source + "' split; one all-reduce after it, the bias added once");
      } else if (split_group(p, column)) {
        out = true;
        rule(layer, "column-parallel", last ? "its outputs split over '" + axis_ + "': vocabulary-parallel, the loss's softmax "
                                                   "all-reduces a max and a sum per row instead of gathering them"
                                            : "its outputs split over '" + axis_ + "', for a row-parallel layer to read");
      } else {
        rule(layer, "replicated", whole(p, column));
      }
    } else if (declared.kind == Kind::elementwise) {
      out = input_split;
      rule(layer, input_split ? "keeps the split" : "replicated", input_split ? "elementwise over features" : "its input is whole");
    } else if (declared.kind == Kind::hidden) {
      const SplitGroup& table = declared.groups.at(0);
      out = split_group(p, table);
      rule(layer, out ? "hidden-parallel" : "replicated",
           out ? "the hidden dimension splits: gathering its output moves half the bytes that all-reducing a "
                 "vocabulary split's masked lookups would (a layout map can still ask for [model, null])"
               : whole(p, table));
    } else if (declared.kind == Kind::block) {
      std::string why;
      for (const SplitGroup& group : declared.groups)
        why += (why.empty() ? "" : "; ") + (split_group(p, group) ? group.when_split : whole(p, group));
      rule(layer, "tensor-parallel block", why + (input_split ? "; its split input is gathered first" : ""));
    } else {
      rule(layer, "replicated", declared.why_whole + (input_split ? ": its split input is gathered" : ""));
    }
    split_[i] = out;
  }

  const VariableStore& store_;
  std::string axis_;
  std::int64_t n_;
  std::vector<bool> split_;  // per layer: its output features split over the axis
  AutoTpPlan plan_;
};

}  // namespace

LayoutMap AutoTpPlan::layout_map() const {
  LayoutMap map;
  // Anchored: as regexes the paths could match each other ("dense/kernel" in "x/dense/kernel_1").
  for (const auto& [path, layout] : variables) map.add(exact_key(path), layout);
  return map;
}

AutoTpPlan plan_auto_tp(const Model& model, const VariableStore& store, const DeviceMesh& mesh,
                        const std::string& model_axis) {
  if (!mesh.has_axis(model_axis))
    throw LayoutError("auto_tp: the mesh " + mesh.str() + " has no axis '" + model_axis + "' to split layers over");
  return Planner(store, mesh, model_axis).plan(model);
}

}  // namespace tessera
