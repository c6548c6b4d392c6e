// Liveness-based memory planning: every intermediate value of a step gets a
// byte range of one arena, and values whose lifetimes do not overlap share
// bytes. The executor allocates the arena once, so a steady-state step makes
// no allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "engine/graph/fusion.hpp"
#include "engine/graph/graph.hpp"

namespace tessera {

struct MemoryPlan {
  static constexpr std::int64_t kExternal = -1;  // bound by the caller (inputs, variables)

  std::vector<NodeId> schedule;       // the nodes to run, in order
  std::vector<std::int64_t> offset;   // per value: byte offset in the arena, or kExternal
  std::vector<ValueId> storage_of;    // per value: the value whose bytes it uses (itself, or
                                      // the viewed value of a reshape)
  std::vector<int> first_use;         // per value: schedule position that defines it
  std::vector<int> last_use;          // per value: last schedule position that reads it
  std::size_t arena_bytes = 0;
  std::size_t unshared_bytes = 0;     // what the values would take without sharing
  std::unordered_map<NodeId, Epilogue> epilogues;  // per fused producer: its bias and activation
  std::unordered_map<NodeId, FusedAttention> attentions;  // per attention's second matmul: the fused call
  std::unordered_map<NodeId, UpdateProduct> update_products;  // per update: its gradient's operands
  std::unordered_map<NodeId, ValueId> conv_bias_gradients;    // per conv2d_grad_weight: the bias gradient it writes too
  std::unordered_map<NodeId, ConvReluGradient> conv_relu_gradients;  // per conv2d_grad_weight: the ReLU it reads through

  // What a scheduled node reads and writes, its epilogue's bias and output included.
  std::vector<ValueId> reads(const Graph& graph, NodeId n) const;
  std::vector<ValueId> writes(const Graph& graph, NodeId n) const;
};

// Plans the nodes needed for `outputs` plus every update node (and what they
// need). Outputs stay valid until the end of the step. Update nodes must come
// after every read of the variables they update (autodiff then updates, in
// that order, guarantees it); the schedule runs each one as early as that
// allows, right after its gradient is final. Bias adds and activations after a
// matmul or convolution are fused into it (fusion.hpp); so is attention where
// `attention` says the backend runs it fused, and a weight gradient's matmul
// into its update where `update_products` says the backend updates by it, and
// a convolution's bias gradient into its weight gradient where
// `conv_bias_gradients` says the backend's call computes it, and the ReLU's
// gradient before a weight gradient where `conv_relu_gradients` says the
// backend takes it through the ReLU.
MemoryPlan plan_memory(const Graph& graph, const std::vector<ValueId>& outputs,
                       const FusedAttentionSupport& attention = {}, const UpdateProductSupport& update_products = {},
                       const ConvBiasGradientSupport& conv_bias_gradients = {},
                       const ConvReluGradientSupport& conv_relu_gradients = {});

}  // namespace tessera
