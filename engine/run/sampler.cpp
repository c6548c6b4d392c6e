#include "engine/run/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "engine/core/error.hpp"

namespace tessera {
namespace {

// Token indices by descending score (ties by index), the probabilities of
// the kept ones after temperature, top-k and top-p, in that order.
struct Candidates {
  std::vector<std::int32_t> tokens;
  std::vector<double> probabilities;  // sum to 1
};

Candidates candidates(std::span<const float> logits, const SamplingOptions& o) {
  if (logits.empty()) throw Error("sampling: no scores to choose a token from");
  std::vector<std::int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  // NaN ranks last, so that a broken score is never chosen over a real one.
  auto score = [&](std::int32_t t) {
    const float s = logits[static_cast<std::size_t>(t)];
    return std::isnan(s) ? -INFINITY : static_cast<double>(s);
  };
  std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) { return score(a) > score(b); });
  std::size_t keep = order.size();
  if (o.top_k > 0) keep = std::min(keep, static_cast<std::size_t>(o.top_k));
  Candidates c;
  const double best = score(order[0]);
  double total = 0;
  for (std::size_t i = 0; i < keep; ++i) {
    const double p = std::isinf(best) ? (i == 0 ? 1.0 : 0.0) : std::exp((score(order[i]) - best) / o.temperature);
    c.tokens.push_back(order[i]);
    c.probabilities.push_back(p);
    total += p;
  }
  for (double& p : c.probabilities) p /= total;
  if (o.top_p < 1.0) {  // the fewest most likely tokens that reach top_p
    double sum = 0;
    std::size_t n = 0;
    while (n < c.tokens.size() && (n == 0 || sum < o.top_p)) sum += c.probabilities[n++];
    c.tokens.resize(n);
    c.probabilities.resize(n);
    for (double& p : c.probabilities) p /= sum;
  }
  // Tokens whose probability underflowed to 0 cannot be drawn.
  while (c.tokens.size() > 1 && c.probabilities.back() == 0.0) {
    c.tokens.pop_back();
    c.probabilities.pop_back();
  }
  return c;
}

std::int32_t argmax(std::span<const float> logits) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best] || (std::isnan(logits[best]) && !std::isnan(logits[i]))) best = i;
  return static_cast<std::int32_t>(best);
}

}  // namespace

void check_sampling(const SamplingOptions& o) {
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature))
    throw ConfigError("temperature must be 0 (greedy) or a finite number above 0, got " + std::to_string(o.temperature));
  if (o.top_k < 0) throw ConfigError("top_k must be 0 (no limit) or more, got " + std::to_string(o.top_k));
  if (!(o.top_p > 0 && o.top_p <= 1))
    throw ConfigError("top_p must lie in (0, 1] (1: no limit), got " + std::to_string(o.top_p));
}

std::vector<std::int32_t> allowed_tokens(std::span<const float> logits, const SamplingOptions& options) {
  check_sampling(options);
  if (options.temperature == 0) return {argmax(logits)};
  std::vector<std::int32_t> tokens = candidates(logits, options).tokens;
  std::sort(tokens.begin(), tokens.end());
  return tokens;
}

std::int32_t sample_token(std::span<const float> logits, const SamplingOptions& options, double uniform) {
  check_sampling(options);
  if (options.temperature == 0) return argmax(logits);
  const Candidates c = candidates(logits, options);
  double sum = 0;
  for (std::size_t i = 0; i < c.tokens.size(); ++i) {
    sum += c.probabilities[i];
    if (uniform < sum) return c.tokens[i];
  }
  return c.tokens.back();  // rounding left the sum a hair under 1
}

}  // namespace tessera
