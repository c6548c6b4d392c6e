// The collectives and views of a partitioned (per-device) graph, over the
// devices that differ only along the mesh axes in attrs.mesh_axes; the
// partitioner (distribution/partitioner.hpp) inserts them, so they have no
// builders and no gradients.
//   all_reduce:      (x) -> attrs.reduce (sum, max) of x over the group
//   all_gather:      (x) -> the group's blocks joined along attrs.axis
//   reduce_scatter:  (x) -> this device's block along attrs.axis of the group's sum
//   shard_slice:     (x) -> this device's block along attrs.axis (a local copy, no communication)
//   all_to_all:      (x) -> block j along attrs.axes[0] sent to member j, received blocks joined along attrs.axes[1]
//   block_view:      (x) -> this device's block of rows (dimension 0) of x: a view, like reshape
//   all_gather_into: (block, whole) -> (): whole = the group's blocks joined along dimension 0, in place
//                    (block is this device's block_view of whole); a side effect, like the updates
#include <bit>

#include "backends/backend.hpp"
#include "engine/graph/collective_context.hpp"
#include "engine/graph/op_rules.hpp"

namespace tessera {

void ops::add_collective_rules(OpRuleTable& t) {
  entry(t, OpKind::all_reduce).run = [](NodeRun& r) {
    r.spmd().all_reduce(r.node.attrs.mesh_axes, r.in(0), r.out(0), r.node.attrs.reduce);
  };
  entry(t, OpKind::all_gather).run = [](NodeRun& r) {
    r.spmd().all_gather(r.node.attrs.mesh_axes, r.in(0), r.out(0), r.node.attrs.axis);
  };
  entry(t, OpKind::reduce_scatter).run = [](NodeRun& r) {
    r.spmd().reduce_scatter(r.node.attrs.mesh_axes, r.in(0), r.out(0), r.node.attrs.axis);
  };
  entry(t, OpKind::all_to_all).run = [](NodeRun& r) {
    r.spmd().all_to_all(r.node.attrs.mesh_axes, r.in(0), r.out(0), r.node.attrs.axes[0], r.node.attrs.axes[1]);
  };
  entry(t, OpKind::shard_slice).run = [](NodeRun& r) {
    const int mesh_axis = std::countr_zero(r.node.attrs.mesh_axes);
    const std::int64_t block = r.out(0).shape()[r.node.attrs.axis];
    r.backend.slice(r.in(0), r.out(0), r.node.attrs.axis, r.spmd().coordinate(mesh_axis) * block);
  };
  entry(t, OpKind::block_view).run = [](NodeRun& r) {  // a view of this device's rows: nothing moves
    const std::int64_t rows = r.graph.shape(r.node.outputs[0])[0];
    r.set_out(0, r.in(0).rows(r.spmd().coordinate(std::countr_zero(r.node.attrs.mesh_axes)) * rows, rows));
  };
  entry(t, OpKind::all_gather_into).run = [](NodeRun& r) {
    r.spmd().all_gather(r.node.attrs.mesh_axes, r.in(0), r.in(1), 0);
  };
}

}  // namespace tessera
