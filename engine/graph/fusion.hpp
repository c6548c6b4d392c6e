// Epilogue fusion: a matmul or convolution followed by a bias add over its
// last axis and an activation (either or both) runs as one backend call, with
// the bias and activation as the kernel's post-ops (oneDNN, cuBLASLt), instead
// of two or three passes over the output in memory.
//
// It works on the schedule, after partitioning, so it only ever joins nodes
// that run one after the other on one device: a row-parallel matmul, whose
// partial sums are all-reduced before the bias add, is left alone.
//
// In the backward pass, max pooling's gradient followed by the gradient of the
// ReLU that produced the pooled values is one pass too (Epilogue::activation
// relu on the pool2d_grad): the ReLU's gradient is dy where its output x > 0,
// and the pool already reads x, so the separate pass over x and dx goes
// (where x <= 0 the fused pass writes 0 even if the pooled gradient was inf).
//
// Mixed precision's cast of a matmul operand to bf16 is fused into the layer
// norm or unary op (a GELU) that computes the operand in f32, where nothing
// else reads the f32 value: the op writes its result rounded to bf16 (as the
// cast rounds it), and the f32 tensor is never written nor read again. So it
// is into a product of bf16 operands kept in f32 (after its bias and
// activation, if fused), also where reshapes come between (attention's q, k
// and v split into heads, the gradient of its output joined from them): the
// matmul writes the cast's value (Epilogue::out, of the reshapes' shape).
//
// Bias-gradient fusion: a convolution's bias gradient, the sum of dy over all
// but its channels, is written by the weight gradient's call that reads the
// same dy, where the backend says that pays (Backend::
// computes_conv_bias_gradient: the CPU's own weight-gradient kernels, which
// sum dy while it is in cache; with diff_bias, oneDNN 2.6's backward-weights
// primitive made the reference CNN's step 6-10% slower than the separate sum,
// five alternating pairs, AMD EPYC Zen 5, 2026-11-24). The weight gradient
// then runs where the sum ran, if that is earlier. The reference CNN's second
// convolution, dy cold (bench_fusions, Intel Xeon, 2026-12-02): 0.94-0.95 of
// the two calls' time.
//
// ReLU-gradient fusion: a convolution's weight gradient whose dy is a ReLU's
// gradient that nothing else reads (a network's first convolution, which has
// no input gradient: the ReLU after it, then its weight and bias gradients)
// reads the ReLU's output and the gradient at it instead, and takes the
// gradient through the ReLU as it reads it, as the ReLU's gradient would
// (Backend::conv2d_backward_weights_through_relu, where the backend has the
// kernel): the pass that writes dy and the weight gradient's read of it go.
// Its bias gradient, fused too, is summed through the same mask. The
// reference CNN's first convolution (AMD EPYC Zen 5, 2026-12-07,
// bench/ab_compare.py --pairs 5 --profile): the ReLU's gradient and the
// weight gradient took 0.95 ms on one thread and 0.69 on two, the fused call
// 0.69 and 0.34; the two-thread step 0.959 of its time (5 of 5 pairs), the
// one-thread step within the minute's noise.
//
// Update fusion: an SGD or Adam update whose gradient is a matmul a^T b (a
// dense layer's weight gradient: its input and output gradient) runs as one
// Backend::*_update_by_product call where the backend has the kernel and
// nothing else reads the gradient: the product is summed in registers and
// applied to the parameter and state tile by tile, and the gradient's pass
// to memory and back goes.
//
// Attention fusion: scores = matmul(q, k^T, alpha), weights = softmax(scores)
// over the last axis (causal or not), an optional cast of the weights to v's
// dtype, then matmul(weights, v), runs as one Backend::fused_attention call
// where the backend has a kernel for it and nothing else reads the scores or
// the weights: an inference pass (training's backward reads the weights). The
// [.., Tq, Tk] scores and weights are then never in memory. Where q, k and v
// are each a head transpose of an f32 [B, T, H, K] value (cast to bf16, or in
// f32), and nothing else reads the transposes and casts, the call reads those
// values instead (rounding them as the casts would); where the product's only reader
// transposes it back to [B, T, H, K], the call writes that; and where mixed
// precision only casts that (or the product) to bf16, through reshapes or
// not (the output projection's operand), the call writes the cast's value.
#pragma once

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "engine/graph/graph.hpp"

namespace tessera {

struct Epilogue {
  ValueId bias = -1;                        // added over the last axis, or -1
  Activation activation = Activation::none; // pool2d_grad: the gradient of this activation after it
  ValueId out = -1;                         // the value the fused call writes (instead of its outputs[0]);
                                            // a matmul's bf16 cast may have another shape of as many elements
};

// Finds the chains producer -> add(bias) -> activation (-> reshapes -> cast
// to bf16, for a matmul of bf16 operands), max pool2d_grad -> relu's
// unary_grad, and f32 layer_norm or unary -> cast to bf16, in
// `schedule` whose intermediate values nothing else reads (and that are not in
// `outputs`), returns them by producer node, and removes the absorbed nodes
// from `schedule`.
std::unordered_map<NodeId, Epilogue> fuse_epilogues(const Graph& graph, std::vector<NodeId>& schedule,
                                                    const std::vector<ValueId>& outputs);

struct FusedAttention {
  ValueId q = -1, k = -1, v = -1;  // what the call reads: the matmuls' operands, or the values before
                                   // their transposes and casts (args.*_tokens_first)
  ValueId out = -1;                // what it writes: the second matmul's output, or its transpose's,
                                   // or their cast to bf16 (through reshapes)
  Shape out_shape;                 // out as the call sees it: the product's (or its transpose's) shape
  FusedAttentionArgs args;         // scale: the first matmul's alpha
};

// Whether a backend runs fused attention for q, k, v stored in `stored` and
// multiplied in `multiply`, out in `out`, heads of `width`
// (Backend::supports_fused_attention).
using FusedAttentionSupport = std::function<bool(DType stored, DType multiply, DType out, std::int64_t width)>;

// Finds the chains above in `schedule` that `supported` takes, none of whose
// matmuls has an epilogue in `epilogues`, returns them by their second
// matmul, and removes the nodes the call does instead from `schedule`.
std::unordered_map<NodeId, FusedAttention> fuse_attention(const Graph& graph, std::vector<NodeId>& schedule,
                                                          const std::vector<ValueId>& outputs,
                                                          const std::unordered_map<NodeId, Epilogue>& epilogues,
                                                          const FusedAttentionSupport& supported);

// A weight gradient's matmul fused into its optimizer update: the update's
// kernel computes the gradient a^T b itself (Backend::*_update_by_product),
// and the gradient is never in memory.
struct UpdateProduct {
  ValueId a = -1, b = -1;  // the gradient's operands: a [K, M], b [K, N]
};

// Whether a backend updates by the product of a and b in `dtype`
// (Backend::supports_update_by_product).
using UpdateProductSupport = std::function<bool(DType dtype, const Shape& a, const Shape& b)>;

// Finds the sgd and adam updates in `schedule` whose gradient is a matmul a^T
// b of f32 operands (no alpha, bias nor activation) that `supported` takes,
// read by nothing else, whose operands nothing writes between the matmul and
// the update; returns them by update, and removes their matmuls from
// `schedule` (the update reads a and b where it runs).
std::unordered_map<NodeId, UpdateProduct> fuse_update_products(const Graph& graph, std::vector<NodeId>& schedule,
                                                               const std::vector<ValueId>& outputs,
                                                               const std::unordered_map<NodeId, Epilogue>& epilogues,
                                                               const UpdateProductSupport& supported);

// Whether a backend's weight gradient of a convolution of x, dy and dw sums
// the bias gradient too at little cost (Backend::computes_conv_bias_gradient).
using ConvBiasGradientSupport =
    std::function<bool(DType dtype, const Shape& x, const Shape& dy, const Shape& dw)>;

// Finds the f32 conv2d_grad_weight nodes in `schedule` that `supported`
// takes and a sum of their dy over axes 0, 1 and 2 (kept as [1, 1, 1, F]);
// returns the sum's value by weight-gradient node, removes the sums from
// `schedule`, and moves each weight gradient to its sum's place where that
// is earlier and nothing between writes its operands.
std::unordered_map<NodeId, ValueId> fuse_conv_bias_gradients(const Graph& graph, std::vector<NodeId>& schedule,
                                                             const std::vector<ValueId>& outputs,
                                                             const ConvBiasGradientSupport& supported);

// A weight gradient taken through the ReLU after its convolution: what the
// call reads instead of its dy.
struct ConvReluGradient {
  ValueId relu_output = -1;  // y, the ReLU's output, laid out as dy
  ValueId dy = -1;           // the gradient at y
};

// Whether a backend takes a weight gradient dw of `dtype` through a ReLU
// (Backend::takes_conv_weight_gradient_through_relu).
using ConvReluGradientSupport = std::function<bool(DType dtype, const Shape& dw)>;

// Finds the f32 conv2d_grad_weight nodes in `schedule` that `supported`
// takes whose dy is a relu unary_grad read by nothing else (its bias sum
// already fused: run after fuse_conv_bias_gradients); returns what each
// reads instead by weight-gradient node, and removes the unary_grads from
// `schedule`.
std::unordered_map<NodeId, ConvReluGradient> fuse_conv_relu_gradients(const Graph& graph,
                                                                      std::vector<NodeId>& schedule,
                                                                      const std::vector<ValueId>& outputs,
                                                                      const ConvReluGradientSupport& supported);

// The root of a value's storage: views (reshape, block_view) share their input's.
ValueId storage_root(const Graph& graph, ValueId v);

}  // namespace tessera
