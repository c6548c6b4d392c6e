// The primitive ops of the graph IR and their attributes.
//
// An op is one enum entry here, a name in op.cpp's table (guarded by a
// static_assert on the count), a builder in Graph that checks shapes and records
// the node, a gradient rule in autodiff.cpp, and a dispatch in executor.cpp.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "backends/op_args.hpp"
#include "backends/op_kinds.hpp"
#include "engine/core/dtype.hpp"
#include "engine/core/shape.hpp"

namespace tessera {

enum class OpKind : std::uint8_t {
  input,              // () -> x: fed by the caller every run (a batch of data)
  variable,           // () -> x: persistent state bound by the caller (weights, moments)
  fill,               // () -> x: every element = attrs.scalar
  matmul,             // (a, b) -> a @ b, see MatmulArgs
  conv2d,             // (x, w) -> y, channels-last, see Conv2dArgs
  conv2d_grad_input,  // (dy, w) -> dx of shape attrs.shape
  conv2d_grad_weight, // (x, dy) -> dw of shape attrs.shape
  pool2d,             // (x) -> y, see Pool2dArgs
  pool2d_grad,        // (x, dy) -> dx
  unary,              // (x) -> f(x), f = attrs.unary
  unary_grad,         // (x, dy) -> dy * f'(x)
  binary,             // (a, b) -> a (op) b with broadcasting
  reduce,             // (x) -> reduced over attrs.axes, keeping the rank
  broadcast_to,       // (x) -> x broadcast to attrs.shape
  reshape,            // (x) -> the same elements as attrs.shape (a view, no copy)
  transpose,          // (x) -> x with axes permuted by attrs.axes
  softmax,            // (x) -> softmax (or log-softmax when attrs.log) over attrs.axis
  softmax_grad,       // (y, dy) -> dx
  layer_norm,         // (x, gamma, beta) -> (y, mean, rstd) over the last axis
  layer_norm_grad,    // (x, gamma, mean, rstd, dy) -> (dx, dgamma, dbeta)
  embedding,          // (table, ids) -> table rows
  embedding_grad,     // (ids, dy) -> dtable of shape attrs.shape (scatter-add into zeros)
  one_hot,            // (ids) -> [..., attrs.shape[-1]] of 0/1 in attrs.dtype (no gradient)
  cast,               // (x) -> x as attrs.dtype
  concat,             // (x0, x1, ...) -> joined along attrs.axis
  slice,              // (x) -> x[attrs.scalar : + attrs.shape[axis]] along attrs.axis
  dropout,            // (x) -> x masked at rate attrs.scalar, mask from (attrs.seed, step);
                      // its gradient is the same op on dy
  sgd_update,         // (param, grad, velocity) -> (): updates param and velocity in place
  adam_update,        // (param, grad, m, v) -> (): updates in place; attrs.adam.step advances per run
  moving_average,     // (state, value) -> (): state = m * state + (1 - m) * value, m = attrs.scalar
  // Collectives of a partitioned (per-device) graph, over the devices that
  // differ only along the mesh axes in attrs.mesh_axes (see distribution/partitioner.hpp).
  all_reduce,         // (x) -> attrs.reduce (sum, max) of x over the group
  all_gather,         // (x) -> the group's blocks joined along attrs.axis
  reduce_scatter,     // (x) -> this device's block along attrs.axis of the group's sum
  shard_slice,        // (x) -> this device's block along attrs.axis (a local copy, no communication)
  all_to_all,         // (x) -> block j along attrs.axes[0] sent to member j, received blocks joined along attrs.axes[1]
  block_view,         // (x) -> this device's block of rows (dimension 0) of x: a view, like reshape
  all_gather_into,    // (block, whole) -> (): whole = the group's blocks joined along dimension 0, in place
                      // (block is this device's block_view of whole); a side effect, like the updates
};
inline constexpr int kOpKindCount = 37;

std::string_view name(OpKind kind);

// What the executor, memory plan, partitioner and cost model need to know of
// an op kind, kept in one table (op.cpp) instead of in each of them.
struct OpInfo {
  std::string_view name;
  int arity;                 // inputs; -1: any number (concat)
  bool bound = false;        // a leaf the caller binds (input, variable): nothing runs
  bool view = false;         // its output is a view of its first input's bytes (reshape, block_view)
  bool collective = false;   // moves data between the devices of a partitioned graph
  bool side_effect = false;  // writes some of its inputs in place and has no outputs (updates)
  std::vector<int> writes = {};  // side_effect: the inputs it writes
};
const OpInfo& op_info(OpKind kind);

// Attributes of a node; each op reads the fields its comment above names.
struct OpAttrs {
  MatmulArgs matmul;
  Conv2dArgs conv;
  Pool2dArgs pool;
  UnaryOp unary = UnaryOp::neg;
  BinaryOp binary = BinaryOp::add;
  ReduceOp reduce = ReduceOp::sum;
  std::vector<int> axes;  // reduce axes or transpose permutation
  int axis = -1;          // softmax axis
  bool log = false;       // log-softmax
  float epsilon = 1e-5f;  // layer norm
  double scalar = 0.0;    // fill value
  Shape shape;            // target shape (reshape, broadcast_to, gradients of known shape)
  DType dtype = DType::f32;  // cast target
  std::uint64_t seed = 0;    // dropout: the mask stream (the step selects its window)
  SgdArgs sgd;
  AdamArgs adam;
  // Collectives: bit a set = mesh axis a (attrs.axis: the tensor dimension).
  // Dropout of a partitioned graph: the axis splitting its rows (the mask's offset);
  // embedding: the axis splitting the table's vocabulary (a masked lookup of its block).
  std::uint32_t mesh_axes = 0;
};

}  // namespace tessera
