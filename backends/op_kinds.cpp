#include "backends/op_kinds.hpp"

#include <array>

namespace tessera {
namespace {

constexpr std::array<std::string_view, kActivationCount> kActivationNames = {
    "none", "relu", "gelu_tanh", "gelu_erf", "tanh", "sigmoid"};
constexpr std::array<std::string_view, kUnaryOpCount> kUnaryNames = {
    "neg", "abs", "relu", "gelu_tanh", "gelu_erf", "tanh", "sigmoid",
    "exp", "log", "sqrt", "rsqrt", "square", "reciprocal"};
constexpr std::array<std::string_view, kBinaryOpCount> kBinaryNames = {"add", "sub", "mul", "div",
                                                                       "max", "min", "equal", "greater"};
constexpr std::array<std::string_view, kReduceOpCount> kReduceNames = {"sum", "mean", "max"};

// One entry per OpKind, in its order.
const std::array<OpInfo, kOpKindCount> kOps = {{
    {.name = "input", .arity = 0, .bound = true},
    {.name = "variable", .arity = 0, .bound = true},
    {.name = "fill", .arity = 0},
    {.name = "matmul", .arity = 2},
    {.name = "conv2d", .arity = 2},
    {.name = "conv2d_grad_input", .arity = 2},
    {.name = "conv2d_grad_weight", .arity = 2},
    {.name = "pool2d", .arity = 1},
    {.name = "pool2d_grad", .arity = 2},
    {.name = "unary", .arity = 1},
    {.name = "unary_grad", .arity = 2},
    {.name = "binary", .arity = 2},
    {.name = "reduce", .arity = 1},
    {.name = "broadcast_to", .arity = 1},
    {.name = "reshape", .arity = 1, .view = true},
    {.name = "transpose", .arity = 1},
    {.name = "softmax", .arity = 1},
    {.name = "softmax_grad", .arity = 2},
    {.name = "cached_attention", .arity = 4},
    {.name = "attention", .arity = 3},
    {.name = "attention_grad", .arity = 6},
    {.name = "layer_norm", .arity = 3},
    {.name = "layer_norm_grad", .arity = 5},
    {.name = "embedding", .arity = 2},
    {.name = "embedding_grad", .arity = 2},
    {.name = "one_hot", .arity = 1},
    {.name = "cast", .arity = 1},
    {.name = "concat", .arity = -1},
    {.name = "slice", .arity = 1},
    {.name = "dropout", .arity = 1},
    {.name = "sgd_update", .arity = 3, .side_effect = true, .writes = {0, 2}},
    {.name = "adam_update", .arity = 4, .side_effect = true, .writes = {0, 2, 3}},
    {.name = "moving_average", .arity = 2, .side_effect = true, .writes = {0}},
    {.name = "cache_write", .arity = 3, .side_effect = true, .writes = {0}},
    {.name = "all_reduce", .arity = 1, .collective = true},
    {.name = "all_gather", .arity = 1, .collective = true},
    {.name = "reduce_scatter", .arity = 1, .collective = true},
    {.name = "shard_slice", .arity = 1},
    {.name = "all_to_all", .arity = 1, .collective = true},
    {.name = "block_view", .arity = 1, .view = true},
    {.name = "all_gather_into", .arity = 2, .collective = true, .side_effect = true, .writes = {1}},
}};

static_assert(kActivationNames.back() == "sigmoid", "update kActivationNames with Activation");
static_assert(kUnaryNames.back() == "reciprocal", "update kUnaryNames with UnaryOp");
static_assert(kBinaryNames.back() == "greater", "update kBinaryNames with BinaryOp");
static_assert(kReduceNames.back() == "max", "update kReduceNames with ReduceOp");

}  // namespace

const OpInfo& op_info(OpKind kind) { return kOps[static_cast<std::size_t>(kind)]; }
std::string_view name(OpKind kind) { return op_info(kind).name; }
std::string_view name(Activation op) { return kActivationNames[static_cast<int>(op)]; }
std::string_view name(UnaryOp op) { return kUnaryNames[static_cast<int>(op)]; }
std::string_view name(BinaryOp op) { return kBinaryNames[static_cast<int>(op)]; }
std::string_view name(ReduceOp op) { return kReduceNames[static_cast<int>(op)]; }
std::string_view name(PoolKind op) { return op == PoolKind::max ? "max" : "avg"; }

UnaryOp activation_unary(Activation act) {
  switch (act) {
    case Activation::relu: return UnaryOp::relu;
    case Activation::gelu_tanh: return UnaryOp::gelu_tanh;
    case Activation::gelu_erf: return UnaryOp::gelu_erf;
    case Activation::tanh: return UnaryOp::tanh;
    case Activation::sigmoid: return UnaryOp::sigmoid;
    case Activation::none: break;
  }
  return UnaryOp::neg;  // unreachable for callers that check Activation::none
}

}  // namespace tessera
