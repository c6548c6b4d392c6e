#include "engine/graph/op.hpp"

#include <array>

namespace tessera {
namespace {

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
    {.name = "all_reduce", .arity = 1, .collective = true},
    {.name = "all_gather", .arity = 1, .collective = true},
    {.name = "reduce_scatter", .arity = 1, .collective = true},
    {.name = "shard_slice", .arity = 1},
    {.name = "all_to_all", .arity = 1, .collective = true},
    {.name = "block_view", .arity = 1, .view = true},
    {.name = "all_gather_into", .arity = 2, .collective = true, .side_effect = true, .writes = {1}},
}};

}  // namespace

const OpInfo& op_info(OpKind kind) { return kOps[static_cast<std::size_t>(kind)]; }

std::string_view name(OpKind kind) { return op_info(kind).name; }

}  // namespace tessera
