#include "layers/initializer.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "backends/philox.hpp"
#include "engine/config/config.hpp"

namespace tessera {
namespace {

constexpr std::array<const char*, 9> kNames = {"zeros", "ones", "constant", "random_normal",
                                               "random_uniform", "glorot_uniform", "glorot_normal",
                                               "he_normal", "he_uniform"};
static_assert(static_cast<int>(InitializerKind::he_uniform) + 1 == kNames.size());

struct Fans {
  double in = 1, out = 1;
};

Fans compute_fans(const Shape& s) {
  if (s.rank() == 0) return {};
  if (s.rank() == 1) return {static_cast<double>(s[0]), static_cast<double>(s[0])};
  double receptive = 1;
  for (int i = 0; i + 2 < s.rank(); ++i) receptive *= static_cast<double>(s[i]);
  return {static_cast<double>(s[s.rank() - 2]) * receptive, static_cast<double>(s[s.rank() - 1]) * receptive};
}

// The stream of one variable: 2^40 positions apart from the next variable's.
std::uint64_t position(std::uint64_t stream, std::int64_t i) {
  return (stream << 40) + static_cast<std::uint64_t>(i);
}

}  // namespace

Initializer parse_initializer(const ConfigNode& node) {
  Initializer init;
  ConfigNode spec = node;
  std::string type;
  if (node.is_scalar()) {
    type = node.as<std::string>();
  } else {
    type = node["type"].as<std::string>();
    spec.expect_keys({"type", "value", "mean", "stddev", "minval", "maxval"});
  }
  std::vector<std::string> known(kNames.begin(), kNames.end());
  auto it = std::find(known.begin(), known.end(), type);
  if (it == known.end()) node.fail_unknown("initializer", type, known);
  init.kind = static_cast<InitializerKind>(it - known.begin());
  if (!node.is_scalar()) {
    init.value = spec.get<float>("value", init.value);
    init.mean = spec.get<float>("mean", init.mean);
    init.stddev = spec.get<float>("stddev", init.stddev);
    init.minval = spec.get<float>("minval", init.minval);
    init.maxval = spec.get<float>("maxval", init.maxval);
  }
  return init;
}

Initializer initializer_arg(ConfigNode args, const std::string& key, const std::string& default_name) {
  if (!args.has(key)) args.get<std::string>(key, default_name);
  return parse_initializer(args[key]);
}

std::string initializer_name(const Initializer& init) { return kNames[static_cast<int>(init.kind)]; }

void initialize(const Initializer& init, const Tensor& out, std::uint64_t seed, std::uint64_t stream) {
  const std::vector<std::int64_t> origin(static_cast<std::size_t>(out.shape().rank()), 0);
  initialize_block(init, out.shape(), origin, out, seed, stream);
}

void initialize_block(const Initializer& init, const Shape& whole, std::span<const std::int64_t> start,
                      const Tensor& block, std::uint64_t seed, std::uint64_t stream) {
  const Shape& shape = block.shape();
  if (shape.rank() != whole.rank() || static_cast<int>(start.size()) != whole.rank())
    throw ShapeError("initialize_block: a block " + shape.str() + " at " + std::to_string(start.size()) +
                     " offsets of a variable " + whole.str() + " (the ranks differ)");
  for (int d = 0; d < whole.rank(); ++d)
    if (start[d] < 0 || start[d] + shape[d] > whole[d])
      throw ShapeError("initialize_block: a block " + shape.str() + " starting at index " + std::to_string(start[d]) +
                       " of dimension " + std::to_string(d) + " lies outside the variable " + whole.str());
  const Fans fans = compute_fans(whole);
  // Fills the block from `value(i)`, the whole's element i: row by row of the
  // block's last dimension, each row a run of consecutive elements of the whole.
  auto fill = [&](auto value) {
    float* out = block.data<float>();
    const int rank = whole.rank();
    const std::int64_t row = rank == 0 ? 1 : shape[rank - 1];
    const std::int64_t rows = row == 0 ? 0 : block.numel() / row;
    std::vector<std::int64_t> index(static_cast<std::size_t>(std::max(rank - 1, 0)), 0);  // the row's block index
    for (std::int64_t r = 0; r < rows; ++r) {
      std::int64_t first = 0;  // the row's first element in the whole, row-major
      for (int d = 0; d < rank; ++d)
        first = first * whole[d] + start[d] + (d + 1 < rank ? index[static_cast<std::size_t>(d)] : 0);
      for (std::int64_t j = 0; j < row; ++j) out[r * row + j] = value(static_cast<std::uint64_t>(first + j));
      for (int d = rank - 2; d >= 0; --d) {  // the next row
        if (++index[static_cast<std::size_t>(d)] < shape[d]) break;
        index[static_cast<std::size_t>(d)] = 0;
      }
    }
  };
  auto uniform = [&](float limit) {
    fill([=](std::uint64_t i) { return limit * (2.0f * philox::uniform01(philox::bits(seed, position(stream, i))) - 1.0f); });
  };
  // Keras' variance-scaling normals are truncated at two standard deviations
  // (resampled), with the stddev corrected for the truncation (/ .87962566).
  auto truncated_normal = [&](float stddev) {
    fill([=](std::uint64_t i) {
      float z;
      std::uint64_t attempt = 0;
      do {
        z = philox::normal(seed, position(stream, i) + (attempt++ << 32));
      } while (std::abs(z) > 2.0f);
      return stddev / 0.87962566f * z;
    });
  };
  switch (init.kind) {
    case InitializerKind::zeros:
    case InitializerKind::ones:
    case InitializerKind::constant: {
      float v = init.kind == InitializerKind::zeros ? 0.0f : init.kind == InitializerKind::ones ? 1.0f : init.value;
      return fill([v](std::uint64_t) { return v; });
    }
    case InitializerKind::random_normal:
      return fill([&](std::uint64_t i) { return init.mean + init.stddev * philox::normal(seed, position(stream, i)); });
    case InitializerKind::random_uniform:
      return fill([&](std::uint64_t i) {
        return init.minval + (init.maxval - init.minval) * philox::uniform01(philox::bits(seed, position(stream, i)));
      });
    case InitializerKind::glorot_uniform: return uniform(static_cast<float>(std::sqrt(6.0 / (fans.in + fans.out))));
    case InitializerKind::glorot_normal: return truncated_normal(static_cast<float>(std::sqrt(2.0 / (fans.in + fans.out))));
    case InitializerKind::he_normal: return truncated_normal(static_cast<float>(std::sqrt(2.0 / fans.in)));
    case InitializerKind::he_uniform: return uniform(static_cast<float>(std::sqrt(6.0 / fans.in)));
  }
}

}  // namespace tessera
