// Element functions of the unary and binary ops, written once for the host and
// the GPU (TESSERA_HOST_DEVICE): elementwise.cu launches them, and tests check
// them on machines without a GPU against the CPU backend.
//
// The formulas, forward and backward, are oneDNN's eltwise ones, which the CPU
// backend runs (backends/cpu/eltwise_algorithm.cpp): neg is linear(-1, 0),
// rsqrt and reciprocal are pow(x, -0.5) and pow(x, -1), and the derivatives
// at kinks are oneDNN's (relu'(0) = 0, abs'(0) = 0). max and min are
// std::max / std::min as the CPU loop calls them, NaNs included.
//
// The <math.h> functions used here (::expf, ::tanhf, ...) are host functions
// and, under nvcc, device functions too.
#pragma once

#include <math.h>

#include "backends/cuda/epilogue.hpp"
#include "backends/host_device.hpp"
#include "backends/op_kinds.hpp"

namespace tessera {

// y = f(x).
TESSERA_HOST_DEVICE inline float unary_forward(UnaryOp op, float x) {
  switch (op) {
    case UnaryOp::neg: return -x;
    case UnaryOp::abs: return ::fabsf(x);
    // The activations share the matmul epilogue's formulas.
    case UnaryOp::relu: return apply_activation(Activation::relu, x);
    case UnaryOp::gelu_tanh: return apply_activation(Activation::gelu_tanh, x);
    case UnaryOp::gelu_erf: return apply_activation(Activation::gelu_erf, x);
    case UnaryOp::tanh: return apply_activation(Activation::tanh, x);
    case UnaryOp::sigmoid: return apply_activation(Activation::sigmoid, x);
    case UnaryOp::exp: return ::expf(x);
    case UnaryOp::log: return ::logf(x);
    case UnaryOp::sqrt: return ::sqrtf(x);
    case UnaryOp::rsqrt: return 1.0f / ::sqrtf(x + 0.0f);  // -0 + 0 = +0: pow(-0, -½) is +inf
    case UnaryOp::square: return x * x;
    case UnaryOp::reciprocal: return 1.0f / x;
  }
  return x;
}

// dx = dy * f'(x).
TESSERA_HOST_DEVICE inline float unary_backward(UnaryOp op, float x, float dy) {
  switch (op) {
    case UnaryOp::neg: return -dy;
    case UnaryOp::abs: return x > 0.0f ? dy : x < 0.0f ? -dy : 0.0f;
    case UnaryOp::relu: return x > 0.0f ? dy : 0.0f;
    case UnaryOp::gelu_tanh: {
      // d/dx 0.5 x (1 + tanh(g)), g = √(2/π)(x + 0.044715 x³).
      const float sqrt_2_over_pi = 0.7978845608028654f;
      const float c = 0.044715f;
      const float g = sqrt_2_over_pi * x * (1.0f + c * x * x);
      const float dg = sqrt_2_over_pi * (1.0f + 3.0f * c * x * x);
      const float v = ::tanhf(g);
      return dy * 0.5f * (1.0f + v) * (1.0f + x * (1.0f - v) * dg);
    }
    case UnaryOp::gelu_erf: {
      // d/dx 0.5 x (1 + erf(x/√2)) = 0.5 (1 + erf(v)) + v e^(-v²) / √π, v = x/√2.
      const float two_over_sqrt_pi = 1.1283791670955126f;
      const float v = x * 0.7071067811865476f;
      return dy * 0.5f * (1.0f + ::erff(v) + v * two_over_sqrt_pi * ::expf(-v * v));
    }
    case UnaryOp::tanh: {
      const float v = ::tanhf(x);
      return dy * (1.0f - v) * (1.0f + v);
    }
    case UnaryOp::sigmoid: {
      const float v = apply_activation(Activation::sigmoid, x);
      return dy * v * (1.0f - v);
    }
    case UnaryOp::exp: return dy * ::expf(x);
    case UnaryOp::log: return dy / x;
    case UnaryOp::sqrt: return dy / (2.0f * ::sqrtf(x));
    case UnaryOp::rsqrt: return dy * -0.5f / (x * ::sqrtf(x));  // -½ x^(-3/2)
    case UnaryOp::square: return dy * 2.0f * x;
    case UnaryOp::reciprocal: return -dy / (x * x);
  }
  return dy;
}

// out = a (op) b.
TESSERA_HOST_DEVICE inline float binary_apply(BinaryOp op, float a, float b) {
  switch (op) {
    case BinaryOp::add: return a + b;
    case BinaryOp::sub: return a - b;
    case BinaryOp::mul: return a * b;
    case BinaryOp::div: return a / b;
    case BinaryOp::max: return a < b ? b : a;  // std::max(a, b)
    case BinaryOp::min: return b < a ? b : a;  // std::min(a, b)
    case BinaryOp::equal: return a == b ? 1.0f : 0.0f;
    case BinaryOp::greater: return a > b ? 1.0f : 0.0f;
  }
  return a;
}

}  // namespace tessera
