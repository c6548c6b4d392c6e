#include "engine/training/callbacks.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <initializer_list>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/config/config.hpp"
#include "engine/core/error.hpp"

namespace tessera {

std::optional<double> log_value(const EpochLog& log, const std::string& name) {
  const bool validation = name.rfind("val_", 0) == 0;
  const Evaluation& pass = validation ? log.validation : log.train;
  const std::string figure = validation ? name.substr(4) : name;
  if (pass.samples == 0) return std::nullopt;
  if (figure == "loss") return pass.loss;
  if (auto it = pass.metrics.find(figure); it != pass.metrics.end()) return it->second;
  return std::nullopt;
}

namespace {

MonitorMode monitor_mode(const std::string& monitor, const std::string& mode) {
  if (mode == "min") return MonitorMode::min;
  if (mode == "max") return MonitorMode::max;
  for (const char* higher_is_better : {"acc", "auc", "precision", "recall"})
    if (monitor.find(higher_is_better) != std::string::npos) return MonitorMode::max;
  return MonitorMode::min;
}

// "run.yaml:14:7: training.callbacks[0] (early_stopping)", or the type alone.
std::string named(const std::string& where, const std::string& type) { return where.empty() ? type : where + " (" + type + ")"; }

// A monitored figure and its best value so far (Keras' improvement rule:
// better than the best by more than min_delta).
class Monitor {
 public:
  Monitor(std::string callback, std::string monitor, const std::string& mode, double min_delta)
      : callback_(std::move(callback)), name_(std::move(monitor)), mode_(monitor_mode(name_, mode)), min_delta_(min_delta) {}

  void check(const FitControl& fit) const {
    const auto names = fit.log_names();
    if (std::find(names.begin(), names.end(), name_) == names.end())
      throw ConfigError(fmt::format("{}: monitor '{}' is not a figure this run logs ({}){}", callback_, name_,
                                    fmt::join(names, ", "),
                                    name_.rfind("val_", 0) == 0 ? "; val_ figures need validation data (data.validation)" : ""));
  }
  const std::string& name() const { return name_; }
  // "val_loss min": a best of the other direction would mean nothing.
  std::string key() const { return name_ + (mode_ == MonitorMode::min ? " min" : " max"); }
  // None for an epoch without it (a validation set of no samples).
  std::optional<double> value(const EpochLog& log) const { return log_value(log, name_); }
  bool improves(double value) const {
    if (!best_) return std::isfinite(value);
    return mode_ == MonitorMode::min ? value < *best_ - min_delta_ : value > *best_ + min_delta_;
  }
  void set_best(double value) { best_ = value; }
  void reset() { best_.reset(); }
  // The best value and the epochs counted since (a checkpoint's CallbackCounts), and back.
  CallbackCounts counts(std::initializer_list<std::pair<const char*, std::int64_t>> counters) const {
    CallbackCounts out;
    for (const auto& [name, value] : counters) out[name] = static_cast<double>(value);
    if (best_) out["best"] = *best_;
    return out;
  }
  // Returns what it goes on from ("wait 2, best loss 0.31"), for the callback
  // to say: a resumed run's stop or rate change then has its reason in the log.
  std::string resume(const CallbackCounts& counts, std::initializer_list<std::pair<const char*, std::int64_t*>> counters) {
    std::string said;
    for (const auto& [name, counter] : counters)
      // A count of a file edited by hand may be anything: only a whole one in range is taken.
      if (auto it = counts.find(name); it != counts.end() && it->second >= 0 && it->second <= 1e15 &&
                                       std::floor(it->second) == it->second) {
        *counter = static_cast<std::int64_t>(it->second);
        said += fmt::format(", {} {}", name, *counter);
      }
    if (auto it = counts.find("best"); it != counts.end()) {
      best_ = it->second;
      said += fmt::format(", best {} {:.6g}", name_, *best_);
    }
    return said.empty() ? said : said.substr(2);
  }

 private:
  std::string callback_, name_;
  MonitorMode mode_;
  double min_delta_;
  std::optional<double> best_;
};

// A resumed run whose checkpoint holds no counts of a callback: one saved
// before checkpoints kept them, or under another monitor or mode.
void say_afresh(const char* callback, const Monitor& monitor) {
  fmt::print("{}: the checkpoint holds no counts of it ({}): counting afresh\n", callback, monitor.key());
}

class EarlyStopping final : public Callback {
 public:
  explicit EarlyStopping(EarlyStoppingOptions o) : o_(std::move(o)), monitor_(named(o_.where, "early_stopping"), o_.monitor, o_.mode, std::abs(o_.min_delta)) {}

  void on_train_begin(FitControl& fit) override {  // each fit() starts afresh, as Keras', unless resumed
    monitor_.check(fit);
    monitor_.reset();
    wait_ = 0;
    if (!o_.restore_best_weights) return;
    best_weights_ = fit.weights();  // fails here where the run cannot
    if (fit.first_epoch() > 1)
      fmt::print("early_stopping: restore_best_weights keeps no counts in checkpoints (they do not hold the best "
                 "epoch's weights): this resumed run counts afresh from epoch {}\n", fit.first_epoch());
  }
  void on_epoch_end(const EpochLog& log, FitControl& fit) override {
    const auto value = monitor_.value(log);
    if (log.epoch <= o_.start_from_epoch || !value) return;
    if (monitor_.improves(*value)) {
      monitor_.set_best(*value);
      wait_ = 0;
      if (o_.restore_best_weights) best_weights_ = fit.weights();
      return;
    }
    if (++wait_ >= o_.patience) {  // Keras: patience 0 and 1 both stop at the first epoch without improvement
      fmt::print("early_stopping: {} did not improve for {} epoch(s); training stops after epoch {}{}\n", monitor_.name(),
                 wait_, log.epoch, o_.restore_best_weights ? ", with the best epoch's weights" : "");
      if (o_.restore_best_weights) fit.set_weights(best_weights_);
      fit.stop_training();
    }
  }
  // With restore_best_weights it keeps nothing: the best epoch's weights are
  // not in the checkpoint, so a resumed run starts counting afresh.
  std::string state_key() const override { return o_.restore_best_weights ? "" : "early_stopping " + monitor_.key(); }
  CallbackCounts counts() const override { return monitor_.counts({{"wait", wait_}}); }
  void resume_counts(const CallbackCounts& counts, FitControl& fit) override {
    if (counts.empty()) return say_afresh("early_stopping", monitor_);
    fmt::print("early_stopping: goes on from the checkpoint's counts: {}\n", monitor_.resume(counts, {{"wait", &wait_}}));
    if (wait_ > 0 && wait_ >= o_.patience) {  // the run it resumes had stopped here
      fmt::print("early_stopping: the checkpoint's run stopped there ({} did not improve for {} epoch(s)): nothing "
                 "to train; raise patience or drop the callback to train on\n", monitor_.name(), wait_);
      fit.stop_training();
    }
  }

 private:
  EarlyStoppingOptions o_;
  Monitor monitor_;
  std::int64_t wait_ = 0;
  WeightSnapshot best_weights_;
};

class ModelCheckpoint final : public Callback {
 public:
  explicit ModelCheckpoint(ModelCheckpointOptions o) : o_(std::move(o)), monitor_(named(o_.where, "model_checkpoint"), o_.monitor, o_.mode, 0) {}

  void on_train_begin(FitControl& fit) override {
    if (o_.save_best_only) monitor_.check(fit);
    monitor_.reset();
    fit.check_checkpoint_dir(o_.dir);
    // A resumed run's best so far is the checkpoint it saved: starting afresh,
    // its first epoch would replace that one however much worse it was.
    if (!o_.save_best_only || fit.first_epoch() == 1) return;
    std::optional<SavedEpoch> saved;
    try {
      saved = fit.saved_epoch(o_.dir);
    } catch (const CheckpointError& e) {
      throw CheckpointError(named(o_.where, "model_checkpoint") + ": cannot read the best epoch so far, to compare "
                            "this run's against: " + e.what());
    }
    if (!saved) return;
    if (auto it = saved->figures.find(monitor_.name()); it != saved->figures.end()) {
      monitor_.set_best(it->second);
      fmt::print("model_checkpoint: {} holds epoch {} ({} = {:.6g}); a later epoch replaces it only if better\n",
                 o_.dir.string(), saved->epoch, monitor_.name(), it->second);
    } else {
      fmt::print("model_checkpoint: {} holds epoch {} without its {} (saved before checkpoints kept their figures, "
                 "or under another monitor); this run's first epoch replaces it\n",
                 o_.dir.string(), saved->epoch, monitor_.name());
    }
  }
  void on_epoch_end(const EpochLog& log, FitControl& fit) override {
    if (o_.save_best_only) {
      const auto value = monitor_.value(log);
      if (!value || !monitor_.improves(*value)) return;
      monitor_.set_best(*value);
      fmt::print("model_checkpoint: {} = {:.6g} is the best so far; saved epoch {} to {}\n", monitor_.name(), *value,
                 log.epoch, o_.dir.string());
    }
    fit.save_checkpoint(o_.dir);
  }

 private:
  ModelCheckpointOptions o_;
  Monitor monitor_;
};

class ReduceLROnPlateau final : public Callback {
 public:
  explicit ReduceLROnPlateau(ReduceLROnPlateauOptions o)
      : o_(std::move(o)), monitor_(named(o_.where, "reduce_lr_on_plateau"), o_.monitor, o_.mode, o_.min_delta) {}

  void on_train_begin(FitControl& fit) override {
    monitor_.check(fit);
    monitor_.reset();
    wait_ = cooldown_ = 0;
  }
  void on_epoch_end(const EpochLog& log, FitControl& fit) override {
    const auto value = monitor_.value(log);
    if (!value) return;
    if (cooldown_ > 0) --cooldown_;
    if (monitor_.improves(*value)) {
      monitor_.set_best(*value);
      wait_ = 0;
      return;
    }
    if (cooldown_ > 0) return;
    if (++wait_ < o_.patience) return;
    const double old_lr = fit.learning_rate();
    if (old_lr <= o_.min_lr) return;
    const double new_lr = std::max(old_lr * o_.factor, o_.min_lr);
    fit.set_learning_rate_scale(fit.learning_rate_scale() * new_lr / old_lr);
    fmt::print("reduce_lr_on_plateau: {} did not improve for {} epoch(s); learning rate {:.6g} -> {:.6g}\n", monitor_.name(),
               wait_, old_lr, new_lr);
    cooldown_ = o_.cooldown;
    wait_ = 0;
  }
  std::string state_key() const override { return "reduce_lr_on_plateau " + monitor_.key(); }
  CallbackCounts counts() const override { return monitor_.counts({{"wait", wait_}, {"cooldown", cooldown_}}); }
  void resume_counts(const CallbackCounts& counts, FitControl&) override {
    if (counts.empty()) return say_afresh("reduce_lr_on_plateau", monitor_);
    fmt::print("reduce_lr_on_plateau: goes on from the checkpoint's counts: {}\n",
               monitor_.resume(counts, {{"wait", &wait_}, {"cooldown", &cooldown_}}));
  }

 private:
  ReduceLROnPlateauOptions o_;
  Monitor monitor_;
  std::int64_t wait_ = 0, cooldown_ = 0;
};

// One line per epoch, flushed per line so a run that is stopped keeps what it
// logged. A resumed run appends, keeping the epochs logged before.
class EpochLogger final : public Callback {
 public:
  EpochLogger(std::filesystem::path path, bool csv) : path_(std::move(path)), csv_(csv) {}

  void on_train_begin(FitControl& fit) override {
    names_ = fit.log_names();
    std::error_code ignored;  // a folder that cannot be made fails the open below
    if (path_.has_parent_path()) std::filesystem::create_directories(path_.parent_path(), ignored);
    const bool append = fit.first_epoch() > 1 && std::filesystem::exists(path_);
    if (out_.is_open()) out_.close();  // the log of an earlier fit() by this callback
    out_.clear();
    out_.open(path_, append ? std::ios::app : std::ios::trunc);
    if (!out_) throw Error("cannot write the training log '" + path_.string() + "'");
    if (csv_ && !append) out_ << fmt::format("epoch,{},learning_rate,seconds\n", fmt::join(names_, ","));
    out_.flush();
  }
  void on_epoch_end(const EpochLog& log, FitControl&) override {
    if (csv_) {
      std::string line = std::to_string(log.epoch);
      for (const auto& name : names_) {
        const auto value = log_value(log, name);
        line += value ? fmt::format(",{:.9g}", *value) : ",";
      }
      out_ << line << fmt::format(",{:.9g},{:.3f}\n", log.learning_rate, log.seconds);
    } else {
      nlohmann::json j{{"epoch", log.epoch}};
      for (const auto& name : names_)
        if (const auto value = log_value(log, name)) j[name] = *value;
      j["learning_rate"] = log.learning_rate;
      j["seconds"] = log.seconds;
      out_ << j.dump() << "\n";
    }
    out_.flush();
    if (!out_) throw Error("cannot write the training log '" + path_.string() + "'");
  }

 private:
  std::filesystem::path path_;
  bool csv_;
  std::vector<std::string> names_;
  std::ofstream out_;
};

std::string parse_mode(const ConfigNode& node) {
  const std::string mode = node.get<std::string>("mode", "auto");
  if (mode != "auto" && mode != "min" && mode != "max") node["mode"].fail_unknown("mode", mode, {"auto", "min", "max"});
  return mode;
}

std::shared_ptr<Callback> parse_callback(const ConfigNode& node) {
  static const std::vector<std::string> kTypes = {"early_stopping", "model_checkpoint", "reduce_lr_on_plateau", "csv_logger",
                                                  "json_logger"};
  const std::string type = node["type"].as<std::string>();
  auto non_negative = [](auto x) { return x >= 0; };
  if (type == "early_stopping") {
    node.expect_keys({"type", "monitor", "min_delta", "patience", "mode", "restore_best_weights", "start_from_epoch"});
    EarlyStoppingOptions o;
    o.where = node.location() + ": " + node.path();
    o.monitor = node.get<std::string>("monitor", o.monitor);
    o.min_delta = node.get_checked("min_delta", 0.0, non_negative, "be >= 0");
    o.patience = node.get_checked<std::int64_t>("patience", 0, non_negative, "be >= 0");
    o.mode = parse_mode(node);
    o.restore_best_weights = node.get<bool>("restore_best_weights", false);
    o.start_from_epoch = node.get_checked<std::int64_t>("start_from_epoch", 0, non_negative, "be >= 0");
    return early_stopping(o);
  }
  if (type == "model_checkpoint") {
    node.expect_keys({"type", "dir", "monitor", "save_best_only", "mode"});
    ModelCheckpointOptions o;
    o.where = node.location() + ": " + node.path();
    o.dir = node.resolve_path(node["dir"].as<std::string>());
    o.monitor = node.get<std::string>("monitor", o.monitor);
    o.save_best_only = node.get<bool>("save_best_only", false);
    o.mode = parse_mode(node);
    return model_checkpoint(o);
  }
  if (type == "reduce_lr_on_plateau") {
    node.expect_keys({"type", "monitor", "factor", "patience", "min_delta", "cooldown", "min_lr", "mode"});
    ReduceLROnPlateauOptions o;
    o.where = node.location() + ": " + node.path();
    o.monitor = node.get<std::string>("monitor", o.monitor);
    o.factor = node.get_checked("factor", 0.1, [](double f) { return f > 0 && f < 1; }, "lie in (0, 1)");
    o.patience = node.get_checked<std::int64_t>("patience", 10, non_negative, "be >= 0");
    o.min_delta = node.get_checked("min_delta", 1e-4, non_negative, "be >= 0");
    o.cooldown = node.get_checked<std::int64_t>("cooldown", 0, non_negative, "be >= 0");
    o.min_lr = node.get_checked("min_lr", 0.0, non_negative, "be >= 0");
    o.mode = parse_mode(node);
    return reduce_lr_on_plateau(o);
  }
  if (type == "csv_logger" || type == "json_logger") {
    node.expect_keys({"type", "path"});
    const auto path = node.resolve_path(node["path"].as<std::string>());
    return type == "csv_logger" ? csv_logger(path) : json_logger(path);
  }
  node["type"].fail_unknown("callback", type, kTypes);
  return nullptr;
}

}  // namespace

std::shared_ptr<Callback> early_stopping(EarlyStoppingOptions options) { return std::make_shared<EarlyStopping>(std::move(options)); }
std::shared_ptr<Callback> model_checkpoint(ModelCheckpointOptions options) {
  return std::make_shared<ModelCheckpoint>(std::move(options));
}
std::shared_ptr<Callback> reduce_lr_on_plateau(ReduceLROnPlateauOptions options) {
  return std::make_shared<ReduceLROnPlateau>(std::move(options));
}
std::shared_ptr<Callback> csv_logger(std::filesystem::path path) { return std::make_shared<EpochLogger>(std::move(path), true); }
std::shared_ptr<Callback> json_logger(std::filesystem::path path) { return std::make_shared<EpochLogger>(std::move(path), false); }

std::vector<std::shared_ptr<Callback>> parse_callbacks(ConfigNode node) {
  std::vector<std::shared_ptr<Callback>> callbacks;
  if (!node.is_sequence()) node.fail("callbacks must be a list, as [{type: early_stopping, patience: 3}]");
  for (std::size_t i = 0; i < node.size(); ++i) callbacks.push_back(parse_callback(node.at(i)));
  return callbacks;
}

}  // namespace tessera
