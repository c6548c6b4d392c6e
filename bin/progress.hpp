// The per-epoch progress display of `tessera train`: a bar redrawn in place on
// a terminal, one plain line per epoch otherwise (logs, CI).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "engine/run/trainer.hpp"

namespace tessera {

class ProgressBar {
 public:
  ProgressBar(std::int64_t epochs, bool terminal) : epochs_(epochs), terminal_(terminal) {}

  void on_batch(std::int64_t epoch, std::int64_t batch, std::int64_t batches, const Evaluation& running);
  void on_epoch(const EpochLog& log);

 private:
  std::int64_t epochs_;
  bool terminal_;
  // The epoch's first report (a resumed epoch starts past batch 1): rates and
  // the ETA count the batches and samples since, over the time since.
  std::int64_t epoch_ = 0, first_batch_ = 0, first_samples_ = 0;
  std::chrono::steady_clock::time_point epoch_start_;
  std::chrono::steady_clock::time_point last_draw_;
};

// "loss 0.4123 - accuracy 0.8812" for a pass's mean loss and metrics.
std::string format_evaluation(const Evaluation& e, const std::string& prefix = "");

}  // namespace tessera
