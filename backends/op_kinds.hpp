// The op table: every op of the graph IR (OpKind) with its traits, one enum
// that the graph, its executor, memory plan, partitioner and cost model and
// the backends' kernels all name; and the small enums that parameterise ops:
// which elementwise function, which binary operator, which reduction. Each
// small enum's name table is guarded by a static_assert on the count in
// op_kinds.cpp, so a new entry without a name breaks the build; the op table
// holds vectors, so tests/backends/ops_test.cpp checks every OpKind has its
// entry (a name) and its rules.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace tessera {

// Fused activation of matmul and convolution epilogues.
enum class Activation : std::uint8_t { none, relu, gelu_tanh, gelu_erf, tanh, sigmoid };
inline constexpr int kActivationCount = 6;

enum class UnaryOp : std::uint8_t {
  neg, abs, relu, gelu_tanh, gelu_erf, tanh, sigmoid, exp, log, sqrt, rsqrt, square, reciprocal
};
inline constexpr int kUnaryOpCount = 13;

// equal and greater give 1 where a == b (a > b), else 0: masks, with no gradient.
enum class BinaryOp : std::uint8_t { add, sub, mul, div, max, min, equal, greater };
inline constexpr int kBinaryOpCount = 8;

enum class ReduceOp : std::uint8_t { sum, mean, max };
inline constexpr int kReduceOpCount = 3;

enum class PoolKind : std::uint8_t { max, avg };

std::string_view name(Activation op);
std::string_view name(UnaryOp op);
std::string_view name(BinaryOp op);
std::string_view name(ReduceOp op);
std::string_view name(PoolKind op);

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
  cached_attention,   // (q, keys, values, positions) -> softmax(attrs.scalar * q keys^T) values over a KV cache:
                      // q [B, H, T, K] against keys and values [B, H, C, K]; query t of sequence b sees
                      // positions 0 .. positions[b] + t (i32 [B, 1]), no later row (no gradient)
  attention,          // (q, k, v) -> (softmax(scale * q k^T) v, logsumexp): q [..., Tq, K], k and v
                      // [..., Tk, K] or all [B, T, H, K] (attrs.attention); logsumexp [..., Tq] f32 (for the gradient)
  attention_grad,     // (q, k, v, out, logsumexp, dout) -> (dq, dk, dv), recomputing the weights
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
  cache_write,        // (cache, rows, positions) -> (): cache[b, :, positions[b] + t, :] = rows[b, :, t, :], in place
                      // (a KV cache [B, H, C, K] taking rows [B, H, T, K] at each sequence's position)
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
inline constexpr int kOpKindCount = 41;

std::string_view name(OpKind kind);

// What the executor, memory plan, partitioner and cost model need to know of
// an op kind, kept in one table (op_kinds.cpp) instead of in each of them.
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

// The unary function an activation applies (none → nullopt is not needed:
// callers check for Activation::none first).
UnaryOp activation_unary(Activation act);

}  // namespace tessera
