#include "engine/graph/op.hpp"

#include <array>

namespace tessera {
namespace {

constexpr std::array<std::string_view, kOpKindCount> kOpNames = {
    "input", "variable", "fill", "matmul", "conv2d", "conv2d_grad_input", "conv2d_grad_weight",
    "pool2d", "pool2d_grad", "unary", "unary_grad", "binary", "reduce", "broadcast_to",
    "reshape", "transpose", "softmax", "softmax_grad", "layer_norm", "layer_norm_grad",
    "embedding", "embedding_grad", "one_hot", "cast", "concat", "slice", "dropout", "sgd_update", "adam_update", "moving_average",
    "all_reduce", "all_gather", "reduce_scatter", "shard_slice", "all_to_all",
    "block_view", "all_gather_into"};
static_assert(kOpNames.back() == "all_gather_into", "update kOpNames with OpKind");

}  // namespace

std::string_view name(OpKind kind) { return kOpNames[static_cast<int>(kind)]; }

}  // namespace tessera
