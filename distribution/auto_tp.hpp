// AutoTP: tensor parallelism chosen for the user, from the layer graph.
//
// Walking the layers in order, it tracks whether each layer's output is split
// along its features over the model axis, and applies Megatron's rules to what
// each layer declares (layers/tensor_split.hpp; this file names no layer):
//   - a linear layer reading whole features is column-parallel (its output
//     features split) and the next one, reading split features, row-parallel
//     (one all-reduce per pair, the row-parallel bias added once after it);
//   - a block splits inside, each of its groups on its own (attention's heads:
//     query/key/value column-parallel, the output projection row-parallel; a
//     feed-forward pair column then row) and gives whole features;
//   - a hidden-split layer (embeddings) splits its output features; a last
//     linear layer (the head onto a vocabulary) is column-parallel and the
//     loss's softmax runs on the split logits (the partitioner all-reduces its
//     max and sum);
//   - elementwise layers keep a split; the rest need whole features (the split
//     is gathered);
//   - a dimension the model axis does not divide stays whole (replicated),
//     and the plan says so.
// The result is a layout per variable: the partitioner does the rest, so an
// AutoTP run is a ModelParallel run with these layouts.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "distribution/layout_map.hpp"
#include "engine/variable_store.hpp"
#include "layers/model.hpp"

namespace tessera {

struct AutoTpPlan {
  struct LayerRule {
    std::string layer;  // layer name
    std::string type;   // "Dense"
    std::string rule;   // "column-parallel", "row-parallel", "replicated", "keeps the split", ...
    std::string why;
  };
  std::vector<LayerRule> layers;
  std::map<std::string, TensorLayout> variables;  // every variable of the model, by path
  // Exact-key layout map of the variables (Keras' lookup then finds each path).
  LayoutMap layout_map() const;
};

// Plans `model` (its variables built in `store`) over mesh axis `model_axis`
// of `mesh`; an axis of size 1 gives a plan that splits nothing.
AutoTpPlan plan_auto_tp(const Model& model, const VariableStore& store, const DeviceMesh& mesh,
                        const std::string& model_axis);

}  // namespace tessera
