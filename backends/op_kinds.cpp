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

static_assert(kActivationNames.back() == "sigmoid", "update kActivationNames with Activation");
static_assert(kUnaryNames.back() == "reciprocal", "update kUnaryNames with UnaryOp");
static_assert(kBinaryNames.back() == "greater", "update kBinaryNames with BinaryOp");
static_assert(kReduceNames.back() == "max", "update kReduceNames with ReduceOp");

}  // namespace

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
