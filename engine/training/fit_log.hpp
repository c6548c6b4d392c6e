// What a pass over data reports (Evaluation) and what an epoch of fit()
// reports (EpochLog): the figures that progress bars, logs and callbacks read.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tessera {

// Loss and metrics over a pass (means over samples).
struct Evaluation {
  double loss = 0;
  std::map<std::string, double> metrics;
  std::int64_t samples = 0;
};

struct EpochLog {
  std::int64_t epoch = 0;  // 1-based
  Evaluation train;
  Evaluation validation;  // samples == 0 when there was no validation data
  double seconds = 0;
  double learning_rate = 0;  // of the epoch's last step
};

// A figure of the log by Keras' name: "loss", a metric ("accuracy"), or
// either with "val_" for the validation pass; none when the log lacks it.
std::optional<double> log_value(const EpochLog& log, const std::string& name);

}  // namespace tessera
