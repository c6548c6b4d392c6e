// Attributes of the parameterised kernels, and the output shapes they imply.
//
// Shape inference lives here, apart from compute, so that the graph builder and
// every backend check operands the same way and raise the same errors: a
// ShapeError whose message names the op and both operand shapes.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "backends/op_kinds.hpp"
#include "engine/core/dtype.hpp"
#include "engine/core/shape.hpp"

namespace tessera {

// out[..., M, N] = act(alpha * op(a)[..., M, K] @ op(b)[..., K, N] + bias[N]),
// where op(x) transposes the last two axes when asked. Batch axes broadcast
// (a weight of rank 2 against activations of rank 3 is the common case).
struct MatmulArgs {
  bool transpose_a = false;
  bool transpose_b = false;
  Activation activation = Activation::none;
  float alpha = 1.0f;
};
Shape matmul_output_shape(const Shape& a, const Shape& b, const MatmulArgs& args);

// How a backend keeps a matmul's constant b (Backend::constant_b_form).
enum class ConstantB : std::uint8_t { as_is, transposed, packed };

// Attention in one pass (Backend::fused_attention): out = softmax(scale * q
// k^T) v over each head's keys. An operand is [..., T, K] ([B, H, T, K]: the
// heads first), or, where its flag says so, [B, T, H, K] as the projections
// write it and the output projection reads it (the tokens first), so that
// the head transposes around attention need no pass of their own.
struct FusedAttentionArgs {
  float scale = 1.0f;
  bool causal = false;           // query i sees keys 0 .. i + Tk - Tq
  DType multiply = DType::bf16;  // the products' operands: f32 q, k, v are rounded to it as read
  bool q_tokens_first = false, k_tokens_first = false, v_tokens_first = false, out_tokens_first = false;
};

// The graph's attention op (Backend::attention): q, k, v and out [..., T, K]
// (the heads first), or all [B, T, H, K] where tokens_first (as the
// projections write them and the output projection reads them).
struct AttentionArgs {
  float scale = 1.0f;
  bool causal = false;  // query i sees keys 0 .. i + Tk - Tq
  bool tokens_first = false;
};
// The shape of attention's logsumexp ([..., Tq] heads first: [B, H, Tq] for
// tokens first) over q, k and v; ShapeError (named `op`) where they do not
// fit: the same other axes and width, v as k, Tq <= Tk when causal.
Shape attention_rows_shape(std::string_view op, const Shape& q, const Shape& k, const Shape& v,
                           const AttentionArgs& args);

// Convolution over channels-last input x[N, H, W, C] with a Keras kernel
// w[KH, KW, C, F], giving y[N, OH, OW, F]. Padding is explicit per side;
// `same_padding` computes what Keras' padding="same" means.
struct Conv2dArgs {
  int stride_h = 1, stride_w = 1;
  int pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
  // Forward only: applied after the bias (an epilogue, engine/graph/fusion.hpp).
  Activation activation = Activation::none;
};
Shape conv2d_output_shape(const Shape& x, const Shape& w, const Conv2dArgs& args);

// 2-D pooling over channels-last x[N, H, W, C].
struct Pool2dArgs {
  PoolKind kind = PoolKind::max;
  int window_h = 2, window_w = 2;
  int stride_h = 2, stride_w = 2;
  int pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
  // Backward of max pooling only: x is a ReLU's output and dx is taken through
  // that ReLU too (zero where x <= 0), an epilogue (engine/graph/fusion.hpp).
  bool relu_before = false;
};
Shape pool2d_output_shape(const Shape& x, const Pool2dArgs& args);

// Keras padding="same": output = ceil(input / stride); the extra goes bottom/right.
void same_padding(std::int64_t input, int window, int stride, int& pad_before, int& pad_after);

struct SgdArgs {
  float learning_rate = 0.01f;
  float momentum = 0.0f;
  bool nesterov = false;
  float weight_decay = 0.0f;  // L2 added to the gradient
};

// Adam, and AdamW when `decoupled_weight_decay` (the decay multiplies the
// parameter by (1 - lr * wd) instead of entering the gradient).
struct AdamArgs {
  float learning_rate = 1e-3f;
  float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f;
  float weight_decay = 0.0f;
  bool decoupled_weight_decay = false;
  std::int64_t step = 1;  // 1-based, for bias correction
};

// Reduction keeping the rank (reduced axes become 1), as oneDNN and NumPy's
// keepdims=True do; `axes` may be negative; duplicates are an error.
Shape reduce_output_shape(const Shape& x, const std::vector<int>& axes, std::string_view op);

// Binary op with NumPy broadcasting; throws ShapeError naming the op.
Shape binary_output_shape(const Shape& a, const Shape& b, std::string_view op);

// Embedding lookup: table[V, D] gathered by ids[...] gives out[..., D].
Shape embedding_output_shape(const Shape& table, const Shape& ids);

// Axis permutation: out[i] = x[perm[i]].
Shape transpose_output_shape(const Shape& x, const std::vector<int>& perm);

}  // namespace tessera
