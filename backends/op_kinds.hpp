// The small enums that parameterise backend kernels and graph ops: which
// elementwise function, which binary operator, which reduction. Each name
// table is guarded by a static_assert on the count in op_kinds.cpp, so a new
// entry without a name breaks the build, not a run.
#pragma once

#include <cstdint>
#include <string_view>

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

// The unary function an activation applies (none → nullopt is not needed:
// callers check for Activation::none first).
UnaryOp activation_unary(Activation act);

}  // namespace tessera
