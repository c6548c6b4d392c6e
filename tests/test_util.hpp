// Helpers shared by the doctest suites: seeded host tensors, comparisons, and
// the message of an expected error.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "engine/core/error.hpp"
#include "engine/core/tensor.hpp"
#include "testing/error_of.hpp"

namespace tessera::test {

using testing::error_of;  // the message of the error a function throws (testing/error_of.hpp)

// Host f32 tensor with values uniform in [low, high), from a seeded engine.
inline Tensor random_tensor(const Shape& shape, unsigned seed, float low = -1.0f, float high = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(low, high);
  std::vector<float> values(static_cast<std::size_t>(shape.numel()));
  for (auto& v : values) v = dist(gen);
  return Tensor::from_vector(values, shape);
}

// Host i32 tensor of labels in [0, classes), from a seeded LCG (the same
// labels on every platform, unlike std's distributions).
inline Tensor random_labels(const Shape& shape, std::int64_t classes, std::uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::i32);
  std::uint64_t x = seed * 2654435761u + 12345;
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    t.data<std::int32_t>()[i] = static_cast<std::int32_t>((x >> 33) % static_cast<std::uint64_t>(classes));
  }
  return t;
}

inline Tensor zeros(const Shape& shape, DType dtype = DType::f32) {
  Tensor t = Tensor::empty(shape, dtype);
  std::memset(t.raw_data(), 0, t.nbytes());
  return t;
}

// Checks |actual - expected| <= atol + rtol * |expected| elementwise, reporting
// the first offending index. Equal values pass (infinities of one sign too); a
// NaN fails, on either side: its difference compares false with any bound.
inline void check_close(const std::vector<float>& actual, const std::vector<float>& expected,
                        double rtol = 1e-5, double atol = 1e-6) {
  REQUIRE(actual.size() == expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i) {
    if (actual[i] == expected[i]) continue;
    double diff = std::abs(static_cast<double>(actual[i]) - expected[i]);
    if (!(diff <= atol + rtol * std::abs(static_cast<double>(expected[i])))) {
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

// The raw bits of a host bf16 tensor's elements: compares bf16 results exactly.
inline std::vector<std::uint16_t> bf16_bits(const Tensor& t) {
  std::vector<std::uint16_t> out;
  for (bf16 x : t.to_vector<bf16>()) out.push_back(x.bits);
  return out;
}

}  // namespace tessera::test
