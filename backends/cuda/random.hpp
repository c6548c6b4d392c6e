// Random fills and dropout as host/device element functions over the Philox
// stream (backends/philox.hpp): element i of a call with (seed, offset) is a
// pure function of (seed, offset + i), as on the CPU backend, so a seed gives
// the same numbers on both. random.cu launches them; tests check them on the
// host against the CPU backend bit for bit.
#pragma once

#include <cmath>
#include <cstdint>

#include "backends/host_device.hpp"
#include "backends/philox.hpp"

namespace tessera {

// a + b * c with the product rounded before the sum, on the device too: nvcc
// would contract it into one fused multiply-add, rounded once, and the GPU's
// numbers would differ from the CPU's in the last bit.
TESSERA_HOST_DEVICE inline float mul_add_unfused(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, __fmul_rn(b, c));
#else
  return a + b * c;
#endif
}

struct UniformFill {
  std::uint64_t seed = 0, offset = 0;
  float low = 0.0f, high = 1.0f;
  // The largest float below `high`: low + (high - low) * u can round up onto
  // high although u < 1, and the range is half-open.
  float top = 0.0f;

  TESSERA_HOST_DEVICE float operator()(std::int64_t i) const {
    const float u = philox::uniform01(philox::bits(seed, offset + static_cast<std::uint64_t>(i)));
    const float r = mul_add_unfused(low, high - low, u);
    return r < high ? r : top;
  }
};

inline UniformFill make_uniform_fill(std::uint64_t seed, std::uint64_t offset, float low,
                                     float high) {
  return {seed, offset, low, high, std::nextafter(high, low)};
}

struct NormalFill {
  std::uint64_t seed = 0, offset = 0;
  float mean = 0.0f, stddev = 1.0f;

  TESSERA_HOST_DEVICE float operator()(std::int64_t i) const {
    return mul_add_unfused(mean, stddev, philox::normal(seed, offset + static_cast<std::uint64_t>(i)));
  }
};

// out[i] = x[i] / (1 - rate) where uniform(seed, offset + i) >= rate, else 0.
struct Dropout {
  std::uint64_t seed = 0, offset = 0;
  float rate = 0.0f;
  float scale = 1.0f;  // 1 / (1 - rate), computed once as the CPU backend does

  TESSERA_HOST_DEVICE float operator()(float x, std::int64_t i) const {
    const bool keep =
        philox::uniform01(philox::bits(seed, offset + static_cast<std::uint64_t>(i))) >= rate;
    return keep ? x * scale : 0.0f;
  }
};

inline Dropout make_dropout(std::uint64_t seed, std::uint64_t offset, float rate) {
  return {seed, offset, rate, 1.0f / (1.0f - rate)};
}

}  // namespace tessera
