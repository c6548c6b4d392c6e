// `tessera bench --chart FILE`: the rows as an SVG bar chart of training
// samples/s (higher is better), one bar per configuration with its min-max
// over rounds as a whisker, the cost model's prediction as a marker above the
// bar, the one-device baseline as a bar of its own and a dashed line, an x
// axis in samples/s and a legend.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bin/bench_row.hpp"

namespace tessera {

struct BenchChart {
  std::string title;          // the config's path
  std::string subtitle;       // how it was measured
  std::int64_t batch = 0;     // samples a step: rates are batch / step time
  BenchRow one_device;        // the baseline (its predicted_ms is not drawn)
  std::vector<BenchRow> rows;
  std::size_t best = 0;       // index into rows
};

// The chart as SVG text.
std::string bench_chart_svg(const BenchChart& chart);

}  // namespace tessera
