// Channels-last 2-D convolution and pooling, and their gradients.
//   conv2d:             (x[N,H,W,C], w[KH,KW,C,F]) -> y[N,OH,OW,F], see Conv2dArgs
//   conv2d_grad_input:  (dy, w) -> dx of shape attrs.shape
//   conv2d_grad_weight: (x, dy) -> dw of shape attrs.shape
//   pool2d:             (x) -> y, see Pool2dArgs
//   pool2d_grad:        (x, dy) -> dx
#include "backends/backend.hpp"
#include "engine/graph/fusion.hpp"
#include "engine/graph/op_rules.hpp"

namespace tessera {

ValueId Graph::conv2d(ValueId x, ValueId w, const Conv2dArgs& args) {
  check_same_dtype("conv2d", x, w);
  // Neither its gradient nor its sharding rule knows of one: the executor
  // fuses a following activation op instead (fusion.hpp).
  if (args.activation != Activation::none)
    throw GraphError("conv2d: a graph's convolution takes no activation (add a unary op after it; got " +
                     std::string(name(args.activation)) + ")");
  OpAttrs attrs;
  attrs.conv = args;
  return single(OpKind::conv2d, {x, w}, attrs, conv2d_output_shape(shape(x), shape(w), args), dtype(x));
}

ValueId Graph::pool2d(ValueId x, const Pool2dArgs& args) {
  check_floating("pool2d", x);
  OpAttrs attrs;
  attrs.pool = args;
  return single(OpKind::pool2d, {x}, attrs, pool2d_output_shape(shape(x), args), dtype(x));
}

namespace {

std::vector<ValueId> conv2d_grads(Graph& g, const Node& n, const std::vector<ValueId>& dys) {
  OpAttrs gx = n.attrs, gw = n.attrs;
  gx.shape = g.shape(n.inputs[0]);
  gw.shape = g.shape(n.inputs[1]);
  const DType dtype = g.dtype(dys[0]);
  return {emit(g, OpKind::conv2d_grad_input, {dys[0], n.inputs[1]}, gx, gx.shape, dtype),
          emit(g, OpKind::conv2d_grad_weight, {n.inputs[0], dys[0]}, gw, gw.shape, dtype)};
}

std::vector<ValueId> pool2d_grads(Graph& g, const Node& n, const std::vector<ValueId>& dys) {
  return {emit(g, OpKind::pool2d_grad, {n.inputs[0], dys[0]}, n.attrs, g.shape(n.inputs[0]), g.dtype(dys[0]))};
}

void run_conv2d(NodeRun& r) {
  Conv2dArgs args = r.node.attrs.conv;
  if (r.epilogue != nullptr) args.activation = r.fused_activation();
  r.backend.conv2d_forward(r.in(0), r.in(1), r.fused_bias(), r.fused_out(), args);
}

// With the bias gradient fused (fusion.hpp), the call sums dy into it too;
// with the ReLU's gradient fused, it reads the ReLU's output and the
// gradient at it instead of dy.
void run_conv2d_grad_weight(NodeRun& r) {
  Tensor db;
  if (r.bias_gradient >= 0) db = r.value(r.bias_gradient).reshape({r.out(0).shape()[3]});
  const Tensor* bias = db.defined() ? &db : nullptr;
  if (const ConvReluGradient* relu = r.conv_relu_gradient)
    return r.backend.conv2d_backward_weights_through_relu(r.in(0), r.value(relu->relu_output), r.value(relu->dy),
                                                          r.out(0), bias, r.node.attrs.conv);
  r.backend.conv2d_backward_weights(r.in(0), r.in(1), r.out(0), bias, r.node.attrs.conv);
}

// A ReLU's gradient after it is an epilogue (fusion.hpp): the same pass zeroes
// dx where the pooled x is not positive.
void run_pool2d_grad(NodeRun& r) {
  Pool2dArgs args = r.node.attrs.pool;
  args.relu_before = r.fused_activation() == Activation::relu;
  r.backend.pool2d_backward(r.in(0), r.in(1), r.fused_out(), args);
}

// Sharding: the batch and the channels may split; H and W never do (that
// would need a halo exchange). Each convolution is linear in both operands.
constexpr DimRole kWhole{};
constexpr DimRole batch{DimRole::result, 0}, channels_summed{DimRole::summed, 0};

ShardingRule conv2d_sharding(const Graph&, const Node&) {  // (x[N,H,W,C], w[KH,KW,C,F]) -> y[N,OH,OW,F]
  return contraction_rule({{batch, kWhole, kWhole, channels_summed}, {kWhole, kWhole, channels_summed, {DimRole::result, 3}}},
                          1, {true, true});
}

ShardingRule conv2d_grad_input_sharding(const Graph&, const Node&) {  // (dy[N,OH,OW,F], w[KH,KW,C,F]) -> dx[N,H,W,C]
  return contraction_rule({{batch, kWhole, kWhole, channels_summed}, {kWhole, kWhole, {DimRole::result, 3}, channels_summed}},
                          1, {true, true});
}

ShardingRule conv2d_grad_weight_sharding(const Graph&, const Node&) {  // (x[N,H,W,C], dy[N,OH,OW,F]) -> dw[KH,KW,C,F]
  const DimRole batch_summed{DimRole::summed, 0};
  return contraction_rule({{batch_summed, kWhole, kWhole, {DimRole::result, 2}}, {batch_summed, kWhole, kWhole, {DimRole::result, 3}}},
                          1, {true, true});
}

const std::vector<int> kSpatial{1, 2};  // H and W of NHWC

ShardingRule pool2d_sharding(const Graph& g, const Node& node) {
  return elementwise_rule(g, node, {node.attrs.pool.kind == PoolKind::avg}, false, kSpatial);
}

ShardingRule pool2d_grad_sharding(const Graph& g, const Node& node) {  // (x, dy) -> dx: linear in dy
  return elementwise_rule(g, node, {false, true}, false, kSpatial);
}

// FLOPs: 2 * KH*KW*C per element of the F-channel tensor (y, or dy in the
// gradients), where KH*KW*C is a kernel's [KH, KW, C, F] window.
std::int64_t kernel_window(const Shape& w) { return w[0] * w[1] * w[2]; }
std::int64_t conv2d_flops(const Graph& g, const Node& node) {  // (x, w) -> y
  return 2 * g.shape(node.outputs[0]).numel() * kernel_window(g.shape(node.inputs[1]));
}
std::int64_t conv2d_grad_input_flops(const Graph& g, const Node& node) {  // (dy, w) -> dx
  return 2 * g.shape(node.inputs[0]).numel() * kernel_window(g.shape(node.inputs[1]));
}
std::int64_t conv2d_grad_weight_flops(const Graph& g, const Node& node) {  // (x, dy) -> dw
  return 2 * g.shape(node.inputs[1]).numel() * kernel_window(g.shape(node.outputs[0]));
}

}  // namespace

void ops::add_conv_pool_rules(OpRuleTable& t) {
  entry(t, OpKind::conv2d) = {conv2d_grads, run_conv2d, conv2d_sharding, conv2d_flops};
  entry(t, OpKind::conv2d_grad_input) = {nullptr,
                                         [](NodeRun& r) {
                                           r.backend.conv2d_backward_data(r.in(0), r.in(1), r.out(0), r.node.attrs.conv);
                                         },
                                         conv2d_grad_input_sharding, conv2d_grad_input_flops};
  entry(t, OpKind::conv2d_grad_weight) = {nullptr, run_conv2d_grad_weight, conv2d_grad_weight_sharding,
                                          conv2d_grad_weight_flops};
  entry(t, OpKind::pool2d) = {
      pool2d_grads, [](NodeRun& r) { r.backend.pool2d_forward(r.in(0), r.out(0), r.node.attrs.pool); }, pool2d_sharding};
  entry(t, OpKind::pool2d_grad) = {
      nullptr, run_pool2d_grad, pool2d_grad_sharding};
}

}  // namespace tessera
