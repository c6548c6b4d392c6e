// Reverse-mode automatic differentiation over the graph IR.
//
// `append_gradients` walks the nodes that lead to a scalar loss in reverse and
// appends, to the same graph, the primitive ops computing d loss / d x for each
// requested value. Every op's rule is written in terms of other graph ops, so
// the backward pass is an ordinary part of the graph: the partitioner and the
// memory planner see the whole training step.
#pragma once

#include <unordered_map>
#include <vector>

#include "engine/graph/graph.hpp"

namespace tessera {

// Returns value -> gradient value for every value in `wrt` (a value the loss
// does not depend on gets a zero-filled gradient). `loss` must have one element.
// Throws GraphError naming the op when a path to the loss has no gradient rule.
std::unordered_map<ValueId, ValueId> append_gradients(Graph& graph, ValueId loss,
                                                      const std::vector<ValueId>& wrt);

// The sum of `grad` over the axes along which a value of `target` shape was
// broadcast to grad's shape (the adjoint of broadcasting).
ValueId unbroadcast(Graph& graph, ValueId grad, const Shape& target);

}  // namespace tessera
