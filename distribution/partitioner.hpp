// Partitioner: turns the global training graph (forward, backward and
// optimizer updates, as autodiff leaves it) into the one per-device graph that
// every device of a mesh runs (SPMD), the GSPMD way.
//
// The caller gives inputs and variables their shardings (a layout map, the
// batch split); the partitioner walks the nodes in order, reads each op's
// sharding rule (engine/graph/sharding_rule.hpp, written with the op in
// engine/graph/ops/) to decide which shardings of its operands it computes
// on and what sharding its results then have (a contracted dimension split
// on both sides gives a partial sum, say), and inserts the collective that
// turns a value's sharding into the one wanted (DESIGN.md's table):
//
//   partial -> replicated: all_reduce      split -> replicated: all_gather
//   partial -> split:      reduce_scatter  replicated -> split: shard_slice (local)
//   split(d) -> split(e):  all_to_all
//
// Data parallel's gradient all-reduce, Megatron's column/row-parallel matmuls
// and FSDP's weight all-gather and gradient reduce-scatter all come out of
// these rules; no collective needs a hand-written gradient.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "distribution/sharding.hpp"
#include "engine/graph/graph.hpp"

namespace tessera {

// One collective of the per-device graph, for plans and accounting.
struct PlannedCollective {
  OpKind kind;               // all_reduce, all_gather, reduce_scatter, all_to_all or all_gather_into
  std::uint32_t mesh_axes;   // the group's axes
  std::int64_t bytes;        // the per-device operand: output of all_gather (the whole of all_gather_into), else the input
  ValueId value;             // the global value it moves
  ValueId local;             // its result in the per-device graph
};

// The communicator's name for a collective op ("all_gather" for all_gather_into).
std::string_view collective_name(OpKind kind);

struct Partition {
  Graph local;                          // what every device runs
  std::vector<ValueId> local_of;        // global value -> local value as produced (-1: none)
  std::vector<Sharding> sharding;       // global value -> sharding as produced
  std::vector<ValueId> outputs;         // local values of the requested outputs, replicated
  std::vector<PlannedCollective> collectives;  // in graph order, including any that feed no output
};

// `leaf_shardings` gives inputs and variables their shardings (the rest are
// replicated; an optimizer's state variables follow their parameter's);
// `constraints` fixes the sharding of values right after they are produced
// (Keras' "<layer>/output" activation layouts). Axes of size 1 are ignored.
// `zero_axis` (a mesh axis, or -1): ZeRO-1 over it: the optimizer state of a
// parameter whose rows it does not split holds only a device's rows, and
// each device updates only those rows, then all-gathers the parameter.
// Throws LayoutError when a given sharding does not fit its value.
Partition partition(const Graph& global, const std::vector<ValueId>& outputs, const DeviceMesh& mesh,
                    const std::map<ValueId, Sharding>& leaf_shardings,
                    const std::map<ValueId, Sharding>& constraints = {}, int zero_axis = -1);

}  // namespace tessera
