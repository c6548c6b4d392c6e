// One row of `tessera bench`: a sharding configuration (mesh x layout x
// processes) timed in rounds that alternate with every other configuration
// and with the one-device baseline, so that a slow minute of the machine
// falls on all of them alike. Every timed figure is a Spread over rounds.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tessera {

// The median of a set of figures and their min-max.
struct Spread {
  double median = 0, min = 0, max = 0;

  bool contains(double x) const { return min <= x && x <= max; }
  bool overlaps(const Spread& other) const { return min <= other.max && other.min <= max; }
};

inline double median_of(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t half = values.size() / 2;  // an even count's median is the mean of its middle two
  return values.size() % 2 ? values[half] : (values[half - 1] + values[half]) / 2;
}

inline Spread spread_of(const std::vector<double>& values) {
  if (values.empty()) return {};
  const auto [low, high] = std::minmax_element(values.begin(), values.end());
  return {median_of(values), *low, *high};
}

struct BenchRow {
  std::string mesh, layout, chosen;  // chosen: what `auto` picked
  int processes = 1;
  std::vector<double> round_ms;      // each round's median step
  Spread step_ms;                    // over round_ms
  Spread speedup;                    // one device's step over this row's, round by round
  bool alternated = true;            // timed in the rounds of the one-device baseline (not a child job's)
  double samples_per_s = 0, comm_share = 0, predicted_ms = 0;
  std::int64_t peak_bytes = 0, param_bytes = 0;
  std::map<std::string, std::int64_t> bytes_per_step;  // "all_reduce batch" -> bus bytes per device
  std::map<std::string, std::int64_t> predicted_bytes;
  std::int64_t inter_process_bytes = 0;  // per step and device: what crossed between processes
  std::string program;                   // a fingerprint: rows alike ran the same sharded program
  std::vector<std::string> notes;        // "best", "same program as 2x1 dp", ...

  std::string label() const { return mesh + " " + (layout == "auto" ? "auto:" + chosen : layout); }
};

}  // namespace tessera
