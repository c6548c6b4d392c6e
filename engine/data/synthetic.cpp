#include "engine/data/synthetic.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/philox.hpp"
#include "engine/data/detail.hpp"

namespace tessera {
namespace {

// Sub-streams of one seed.
enum Stream : std::uint64_t { kLabels = 1, kClassMeans, kInputs, kWeights, kNoise };

Shape batch_shape(std::int64_t n, const Shape& sample_shape) {
  std::vector<std::int64_t> dims{n};
  dims.insert(dims.end(), sample_shape.dims().begin(), sample_shape.dims().end());
  return Shape(std::move(dims));
}

void check_sizes(const char* what, std::int64_t n, const Shape& sample_shape) {
  if (n <= 0 || sample_shape.numel() <= 0)
    throw DataError(std::string(what) + ": needs n > 0 samples of a non-empty shape, got n = " +
                    std::to_string(n) + " and shape " + sample_shape.str());
}

}  // namespace

Dataset synthetic_classification(std::int64_t n, const Shape& sample_shape, std::int64_t classes,
                                 std::uint64_t seed) {
  check_sizes("synthetic_classification", n, sample_shape);
  if (classes < 2 || classes > (std::int64_t{1} << 31) - 1)
    throw DataError("synthetic_classification: needs 2 or more classes, got " +
                    std::to_string(classes));
  const std::int64_t d = sample_shape.numel();
  const auto label_key = data_detail::stream_key(seed, kLabels);
  const auto mean_key = data_detail::stream_key(seed, kClassMeans);
  const auto input_key = data_detail::stream_key(seed, kInputs);

  std::vector<float> means(static_cast<std::size_t>(classes * d));
  for (std::size_t i = 0; i < means.size(); ++i) means[i] = philox::normal(mean_key, i);

  Tensor inputs = Tensor::empty(batch_shape(n, sample_shape), DType::f32);
  Tensor labels = Tensor::empty(Shape{n}, DType::i32);
  float* x = inputs.data<float>();
  std::int32_t* y = labels.data<std::int32_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    // 64 random bits make the modulo's bias negligible for any class count.
    philox::Block b = philox::philox4x32(static_cast<std::uint64_t>(i), 0, label_key);
    std::uint64_t r = std::uint64_t{b.v[0]} | (std::uint64_t{b.v[1]} << 32);
    y[i] = static_cast<std::int32_t>(r % static_cast<std::uint64_t>(classes));
    const float* mean = means.data() + y[i] * d;
    for (std::int64_t j = 0; j < d; ++j)
      x[i * d + j] = mean[j] + philox::normal(input_key, static_cast<std::uint64_t>(i * d + j));
  }
  return Dataset{inputs, labels,
                 "synthetic classification (" + std::to_string(classes) + " classes, seed " +
                     std::to_string(seed) + ")"};
}

Dataset synthetic_regression(std::int64_t n, const Shape& sample_shape, std::int64_t outputs,
                             std::uint64_t seed, float noise) {
  check_sizes("synthetic_regression", n, sample_shape);
  if (outputs <= 0)
    throw DataError("synthetic_regression: needs 1 or more outputs, got " +
                    std::to_string(outputs));
  const std::int64_t d = sample_shape.numel();
  const auto input_key = data_detail::stream_key(seed, kInputs);
  const auto weight_key = data_detail::stream_key(seed, kWeights);
  const auto noise_key = data_detail::stream_key(seed, kNoise);

  std::vector<float> w(static_cast<std::size_t>(d * outputs));
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = scale * philox::normal(weight_key, i);

  Tensor inputs = Tensor::empty(batch_shape(n, sample_shape), DType::f32);
  Tensor targets = Tensor::empty(Shape{n, outputs}, DType::f32);
  float* x = inputs.data<float>();
  float* y = targets.data<float>();
  for (std::int64_t i = 0; i < n * d; ++i)
    x[i] = philox::normal(input_key, static_cast<std::uint64_t>(i));
  std::vector<double> row(static_cast<std::size_t>(outputs));
  for (std::int64_t i = 0; i < n; ++i) {
    std::fill(row.begin(), row.end(), 0.0);
    for (std::int64_t j = 0; j < d; ++j) {
      const double xj = x[i * d + j];
      const float* wj = w.data() + j * outputs;
      for (std::int64_t o = 0; o < outputs; ++o) row[static_cast<std::size_t>(o)] += xj * wj[o];
    }
    for (std::int64_t o = 0; o < outputs; ++o)
      y[i * outputs + o] =
          static_cast<float>(row[static_cast<std::size_t>(o)]) +
          noise * philox::normal(noise_key, static_cast<std::uint64_t>(i * outputs + o));
  }
  return Dataset{inputs, targets,
                 "synthetic regression (" + std::to_string(outputs) + " outputs, seed " +
                     std::to_string(seed) + ")"};
}

}  // namespace tessera
