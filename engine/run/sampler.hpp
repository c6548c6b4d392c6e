// Choosing the next token from a model's scores (logits), as text generation
// does: greedy, or sampled with temperature, top-k and top-p (nucleus).
//
//   temperature 0      the highest score (the first of equal ones): greedy
//   temperature t > 0  softmax(logits / t), restricted to
//     top_k k > 0      the k highest scores (ties at the k-th kept by index),
//     top_p p < 1      then the fewest most likely tokens whose probabilities
//                      add up to p or more,
//   renormalised, and one token drawn by a number in [0, 1) from TokenRng.
// The same logits, options and seed give the same tokens on every machine:
// the generator is std::mt19937_64 (its sequence is fixed by the standard),
// turned into doubles by its top 53 bits, and the arithmetic is in double.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace tessera {

struct SamplingOptions {
  double temperature = 1.0;
  std::int64_t top_k = 0;  // 0: no limit
  double top_p = 1.0;      // 1: no limit
};

// Throws ConfigError naming the option for a temperature below 0 or not
// finite, top_k below 0, or top_p outside (0, 1].
void check_sampling(const SamplingOptions& options);

// The tokens a draw can return, in increasing token order (greedy: one).
std::vector<std::int32_t> allowed_tokens(std::span<const float> logits, const SamplingOptions& options);

// The next token; `uniform` in [0, 1) makes the draw (unused when greedy).
std::int32_t sample_token(std::span<const float> logits, const SamplingOptions& options, double uniform);

// Numbers in [0, 1) for sample_token, from a seed.
class TokenRng {
 public:
  explicit TokenRng(std::uint64_t seed) : engine_(seed) {}
  double next() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

 private:
  std::mt19937_64 engine_;
};

}  // namespace tessera
