// How an op computes on split operands, said without a mesh: each op's
// sharding rule (next to its other rules in engine/graph/ops/) describes its
// operands' dimensions in this small vocabulary, and the partitioner
// (distribution/partitioner.cpp) interprets it for every node of a graph,
// choosing splits and inserting the collectives. A new op written in these
// terms needs nothing in distribution/.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "engine/graph/graph.hpp"

namespace tessera {

// What one dimension of an operand is to the op: result dimension `index`, or
// summed pair `index` (split alike on every side, the result is a partial sum
// over the axis), or whole on every device.
struct DimRole {
  enum Kind { result, summed, whole } kind = whole;
  int index = 0;
};

// A dimension of a node's operand or result.
struct DimRef {
  bool result = false;
  int index = 0;  // operand or result number
  int dim = 0;
};

// Builds, in the local graph, an op whose dimension `axis` stays split: from
// the local operands and `across`, which reduces a local value over the split
// (an all-reduce), it returns the local result.
using AcrossSplit = std::function<ValueId(ValueId local, ReduceOp op)>;
using SplitExpansion = ValueId (*)(Graph& local, const Node& node, const std::vector<ValueId>& inputs,
                                   const AcrossSplit& across);

struct ShardingRule {
  enum class Form {
    none,          // no rule: the partitioner places leaves and collectives itself
    dims,          // every operand dimension has a DimRole (elementwise ops, contractions, reductions, transposes)
    reshape,       // a split carries through where its block is the same run of elements in both shapes
    rows,          // a normalization of rows: operand 0 may be split along dimension 0 only (RowPart)
    follow_first,  // an update: every operand split as operand 0 is, no results
  };
  Form form = Form::none;

  // Partial sums: the op is linear in operand i alone, the others fixed
  // (linear[i]), or linear in all its operands jointly (`additive`: add,
  // concat), which takes equal partial sums. Elsewhere they are summed first.
  std::vector<bool> linear;
  bool additive = false;

  // Form::dims
  std::vector<std::vector<DimRole>> roles;  // per operand, per dimension
  int summed = 0;                           // how many summed pairs
  bool results_first = false;  // split result dimensions before summed pairs (the default prefers summed ones)
  bool mean = false;           // the summed pairs are averaged: local results are rescaled by the split
  // Results after the first (attention's logsumexp, its gradient's dk and dv):
  // for each, per dimension, the dimension of result 0 whose split it takes (-1: whole).
  std::vector<std::vector<int>> later_results;

  // Form::rows: what each operand and result is to the rows of operand 0.
  enum class RowPart {
    block,            // split like operand 0
    per_row,          // one value per row ([rows])
    per_feature,      // one value per feature, whole
    per_feature_sum,  // one value per feature summed over rows: a partial sum over the rows' axis
  };
  std::vector<RowPart> operand_parts, result_parts;

  // The run rule needs to know which mesh axis splits this dimension (a
  // block's offset): the partitioner writes it in the node's attrs.mesh_axes.
  std::optional<DimRef> block_axis;

  // Optimizer updates: operands from this one on are state that ZeRO may
  // hold by rows (-1: none).
  int optimizer_state_from = -1;

  // Where operand 0's dimension `split_axis` is split (and not a partial sum),
  // the op is built by this instead of gathering that dimension.
  SplitExpansion split_expansion = nullptr;
  int split_axis = 0;
};

// The rules the op families build their own from.

// Elementwise with NumPy broadcasting: an operand's dimension is the result's
// where their sizes agree (a broadcast one is whole); `whole` lists result
// dimensions never split.
ShardingRule elementwise_rule(const Graph& graph, const Node& node, std::vector<bool> linear, bool additive = false,
                              const std::vector<int>& whole = {});
// A contraction (matmul, convolution, embedding) in roles.
ShardingRule contraction_rule(std::vector<std::vector<DimRole>> roles, int summed, std::vector<bool> linear);
// An update of operand 0 in place.
ShardingRule follow_first_rule(int optimizer_state_from = -1);

}  // namespace tessera
