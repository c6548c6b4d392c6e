// Variable initializers with Keras' names and fan conventions.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "engine/core/tensor.hpp"

namespace tessera {

class ConfigNode;

enum class InitializerKind : std::uint8_t {
  zeros, ones, constant, random_normal, random_uniform, glorot_uniform, glorot_normal,
  he_normal, he_uniform
};

struct Initializer {
  InitializerKind kind = InitializerKind::glorot_uniform;
  float value = 0.0f;                        // constant
  float mean = 0.0f, stddev = 0.05f;         // random_normal
  float minval = -0.05f, maxval = 0.05f;     // random_uniform
};

// "glorot_uniform", or {type: random_normal, stddev: 0.02}; throws ConfigError
// with the known names and a did-you-mean.
Initializer parse_initializer(const ConfigNode& node);
std::string initializer_name(const Initializer& init);
// The initializer under `key` of a layer's arguments; when absent, `default_name`
// (written into the config, so the resolved config shows it).
Initializer initializer_arg(ConfigNode args, const std::string& key, const std::string& default_name);

// Fills a host f32 tensor. Fans follow Keras: [in, out] for a matrix, the
// receptive field times the last two axes for a convolution kernel. The
// numbers are a pure function of (seed, stream), from Philox.
void initialize(const Initializer& init, const Tensor& out, std::uint64_t seed, std::uint64_t stream);

// Fills `block` with its part of a variable of shape `whole` that starts at
// `start` (one index per dimension): exactly the values initialize() gives
// those elements of the whole, element i of the whole being drawn from Philox
// position i of the stream. A device can so make its own block of a sharded
// variable without any process holding the whole (fans come from `whole`).
void initialize_block(const Initializer& init, const Shape& whole, std::span<const std::int64_t> start,
                      const Tensor& block, std::uint64_t seed, std::uint64_t stream);

}  // namespace tessera
