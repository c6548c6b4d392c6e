// Element functions of the matmul epilogue, written once for the host and the
// GPU (TESSERA_HOST_DEVICE), so tests check them on machines without a GPU.
//
// The CUDA matmul runs the GEMM (alpha folded in) and then, when a bias or an
// activation is asked for, one in-place pass out = act(out + bias[col]) with
// these functions (cuda_kernels.cu). The formulas are oneDNN's eltwise ones,
// which the CPU backend uses: gelu_tanh is 0.5 x (1 + tanh(√(2/π)(x + 0.044715 x³))),
// gelu_erf is 0.5 x (1 + erf(x / √2)), sigmoid is 1 / (1 + e^-x).
#pragma once

#include <math.h>

#include <cstdint>
#include <cstring>

#include "backends/host_device.hpp"
#include "backends/op_kinds.hpp"

namespace tessera {

TESSERA_HOST_DEVICE inline float apply_activation(Activation act, float x) {
  switch (act) {
    case Activation::none: return x;
    case Activation::relu: return x > 0.0f ? x : 0.0f;
    case Activation::gelu_tanh: {
      const float sqrt_2_over_pi = 0.7978845608028654f;
      return 0.5f * x * (1.0f + ::tanhf(sqrt_2_over_pi * (x + 0.044715f * x * x * x)));
    }
    case Activation::gelu_erf: return 0.5f * x * (1.0f + ::erff(x * 0.7071067811865476f));
    case Activation::tanh: return ::tanhf(x);
    case Activation::sigmoid: return 1.0f / (1.0f + ::expf(-x));
  }
  return x;
}

// bf16 bits ↔ f32, as engine/core/dtype.hpp's to_f32 / to_bf16 (round to nearest
// even, NaN stays a quiet NaN), usable in device code.
TESSERA_HOST_DEVICE inline float bf16_bits_to_float(std::uint16_t bits) {
  std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

TESSERA_HOST_DEVICE inline std::uint16_t float_to_bf16_bits(float value) {
  std::uint32_t u;
  memcpy(&u, &value, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

// One output element after the GEMM: act(acc + bias).
TESSERA_HOST_DEVICE inline float matmul_epilogue(float acc, float bias, Activation act) {
  return apply_activation(act, acc + bias);
}

}  // namespace tessera
