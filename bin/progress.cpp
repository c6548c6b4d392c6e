#include "bin/progress.hpp"

#include <cstdio>

#include <fmt/core.h>

namespace tessera {
namespace {

// A rate to three significant figures where it is small: a large model's
// 0.4 samples/s is not "0".
std::string format_rate(double rate) {
  return rate >= 100 ? fmt::format("{:.0f}", rate) : rate >= 10 ? fmt::format("{:.1f}", rate) : fmt::format("{:.2f}", rate);
}

}  // namespace

std::string format_evaluation(const Evaluation& e, const std::string& prefix) {
  std::string s = fmt::format("{}loss {:.4f}", prefix, e.loss);
  for (const auto& [name, value] : e.metrics) s += fmt::format(" - {}{} {:.4f}", prefix, name, value);
  return s;
}

ProgressBar ProgressBar::pass(std::string title, bool with_loss, bool terminal, std::string unit) {
  ProgressBar bar(0, terminal);
  bar.title_ = std::move(title);
  bar.with_loss_ = with_loss;
  bar.unit_ = std::move(unit);
  return bar;
}

void ProgressBar::on_batch(std::int64_t epoch, std::int64_t batch, std::int64_t batches, const Evaluation& running) {
  auto now = std::chrono::steady_clock::now();
  if (epoch != epoch_ || epoch_start_ == std::chrono::steady_clock::time_point{}) {
    epoch_ = epoch;
    epoch_start_ = last_draw_ = now;
    first_batch_ = batch;
    first_samples_ = running.samples;
  }
  // A terminal redraws the bar at most 10 times a second; a log gets a plain
  // line every tenth of a long epoch, and every 10 seconds of a slow one.
  // The last batch is left to on_epoch (or the pass's result).
  if (!terminal_) {
    const bool tenth = batches >= 50 && batch % (batches / 10) == 0;
    if (batch == batches || (!tenth && now - last_draw_ < std::chrono::seconds(10))) return;
  }
  if (terminal_ && batch != batches && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  double elapsed = std::chrono::duration<double>(now - epoch_start_).count();
  const auto timed_batches = static_cast<double>(batch - first_batch_);
  double rate = elapsed > 0 ? static_cast<double>(running.samples - first_samples_) / elapsed : 0;
  double eta = timed_batches > 0 ? elapsed * static_cast<double>(batches - batch) / timed_batches : 0;
  constexpr int kWidth = 30;
  int filled = static_cast<int>(kWidth * batch / std::max<std::int64_t>(1, batches));
  // On a terminal: back to the line's start, and clear what a longer line left.
  const std::string title = title_.empty() ? fmt::format("Epoch {}/{}", epoch, epochs_) : title_;
  fmt::print("{}{} [{}{}] {}/{} - {}{} {}/s - ETA {:.0f}s{}", terminal_ ? "\r\033[K" : "", title,
             std::string(static_cast<std::size_t>(filled), '='), std::string(static_cast<std::size_t>(kWidth - filled), ' '),
             batch, batches, with_loss_ ? format_evaluation(running) + " - " : "", format_rate(rate), unit_, eta,
             terminal_ ? "" : "\n");
  std::fflush(stdout);
}

void ProgressBar::finish() {
  if (terminal_) fmt::print("\r\033[K");
  std::fflush(stdout);
}

void ProgressBar::on_epoch(const EpochLog& log) {
  double rate = log.seconds > 0 ? static_cast<double>(log.train.samples) / log.seconds : 0;
  std::string line = fmt::format("Epoch {}/{} - {:.1f}s - {} samples/s - {}", log.epoch, epochs_, log.seconds,
                                 format_rate(rate), format_evaluation(log.train));
  if (log.validation.samples > 0) line += " - " + format_evaluation(log.validation, "val_");
  fmt::print("{}{}\n", terminal_ ? "\r\033[K" : "", line);
  std::fflush(stdout);
}

}  // namespace tessera
