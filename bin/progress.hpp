// The progress display of `tessera train` (per epoch) and of passes that are
// not training (eval, predict): a bar redrawn in place on a terminal; plain
// lines otherwise (logs, CI, pipes), a tenth of a long pass apart or every
// 10 seconds, with no escape codes.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "engine/run/trainer.hpp"

namespace tessera {

class ProgressBar {
 public:
  // "Epoch 3/10 [=====     ] 40/100 - loss ... - 812 samples/s - ETA 7s"
  ProgressBar(std::int64_t epochs, bool terminal) : epochs_(epochs), terminal_(terminal) {}
  // "Evaluating [=====     ] 40/100 - loss ... - 812 samples/s - ETA 7s";
  // without a loss for a pass that computes none (predict). `unit` names
  // what Evaluation::samples counts ("Verifying [==   ] 3/40 - 2 tensors/s").
  static ProgressBar pass(std::string title, bool with_loss, bool terminal, std::string unit = "samples");

  void on_batch(std::int64_t epoch, std::int64_t batch, std::int64_t batches, const Evaluation& running);
  void on_epoch(const EpochLog& log);
  // A pass's bar erased from the terminal, before its result is printed.
  void finish();

 private:
  std::int64_t epochs_;
  bool terminal_;
  std::string title_;      // a pass's; empty: "Epoch e/E"
  bool with_loss_ = true;
  std::string unit_ = "samples";
  // The epoch's first report (a resumed epoch starts past batch 1): rates and
  // the ETA count the batches and samples since, over the time since.
  std::int64_t epoch_ = 0, first_batch_ = 0, first_samples_ = 0;
  std::chrono::steady_clock::time_point epoch_start_;
  std::chrono::steady_clock::time_point last_draw_;
};

// "loss 0.4123 - accuracy 0.8812" for a pass's mean loss and metrics.
std::string format_evaluation(const Evaluation& e, const std::string& prefix = "");

}  // namespace tessera
