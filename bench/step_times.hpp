// A benchmark's step times: `warmup` untimed steps, then `steps` timed one by
// one (wall clock, in ms), and their min, median and max.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace tessera::bench {

struct StepSummary {
  double min_ms = 0, median_ms = 0, max_ms = 0;
  int steps = 0;
  bool valid() const { return steps > 0; }
};

inline StepSummary summarize_steps(std::vector<double> times_ms) {
  StepSummary s;
  if (times_ms.empty()) return s;
  std::sort(times_ms.begin(), times_ms.end());
  const std::size_t n = times_ms.size();
  s.steps = static_cast<int>(n);
  s.min_ms = times_ms.front();
  s.max_ms = times_ms.back();
  s.median_ms = n % 2 ? times_ms[n / 2] : 0.5 * (times_ms[n / 2 - 1] + times_ms[n / 2]);
  return s;
}

// `step` must include whatever waits for its work to finish (a device's synchronize).
template <class Step>
std::vector<double> time_steps_ms(Step&& step, int warmup, int steps) {
  for (int i = 0; i < warmup; ++i) step();
  std::vector<double> times;
  times.reserve(static_cast<std::size_t>(std::max(steps, 0)));
  for (int i = 0; i < steps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    step();
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  return times;
}

}  // namespace tessera::bench
