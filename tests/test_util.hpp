// Helpers shared by the doctest suites: seeded host tensors and comparisons.
#pragma once

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "engine/core/tensor.hpp"

namespace tessera::test {

// Host f32 tensor with values uniform in [low, high), from a seeded engine.
inline Tensor random_tensor(const Shape& shape, unsigned seed, float low = -1.0f, float high = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(low, high);
  std::vector<float> values(static_cast<std::size_t>(shape.numel()));
  for (auto& v : values) v = dist(gen);
  return Tensor::from_vector(values, shape);
}

inline Tensor zeros(const Shape& shape, DType dtype = DType::f32) {
  Tensor t = Tensor::empty(shape, dtype);
  std::memset(t.raw_data(), 0, t.nbytes());
  return t;
}

// Checks |actual - expected| <= atol + rtol * |expected| elementwise, reporting
// the first offending index.
inline void check_close(const std::vector<float>& actual, const std::vector<float>& expected,
                        double rtol = 1e-5, double atol = 1e-6) {
  REQUIRE(actual.size() == expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i) {
    double diff = std::abs(static_cast<double>(actual[i]) - expected[i]);
    if (diff > atol + rtol * std::abs(static_cast<double>(expected[i]))) {
      FAIL_CHECK("element " << i << ": got " << actual[i] << ", expected " << expected[i]
                            << " (diff " << diff << ")");
      return;
    }
  }
}

inline void check_close(const Tensor& actual, const std::vector<float>& expected,
                        double rtol = 1e-5, double atol = 1e-6) {
  check_close(actual.to_vector<float>(), expected, rtol, atol);
}

}  // namespace tessera::test
