// The attributes of the graph IR's ops. The ops themselves (OpKind) and their
// traits are the op table of backends/op_kinds.hpp, shared with the backends.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/op_args.hpp"
#include "backends/op_kinds.hpp"
#include "engine/core/dtype.hpp"
#include "engine/core/shape.hpp"

namespace tessera {

// Attributes of a node; each op reads the fields its entry in OpKind (backends/op_kinds.hpp) names.
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
  bool causal = false;    // softmax over [..., queries, keys] that sees no later key (Backend::softmax)
  float epsilon = 1e-5f;  // layer norm
  double scalar = 0.0;    // fill value
  Shape shape;            // target shape (reshape, broadcast_to, gradients of known shape)
  DType dtype = DType::f32;  // cast target
  AttentionArgs attention;   // attention and its gradient
  std::uint64_t seed = 0;    // dropout: the mask stream (the step selects its window)
  SgdArgs sgd;
  AdamArgs adam;
  // Collectives: bit a set = mesh axis a (attrs.axis: the tensor dimension).
  // Dropout of a partitioned graph: the axis splitting its rows (the mask's offset);
  // embedding: the axis splitting the table's vocabulary (a masked lookup of its block).
  std::uint32_t mesh_axes = 0;
};

}  // namespace tessera
