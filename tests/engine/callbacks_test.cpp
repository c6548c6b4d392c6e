// Keras-style callbacks of Trainer::fit: early stopping (and restoring the
// best weights), the best checkpoint, reducing the learning rate on a
// plateau, per-epoch logs, and their errors before the first step.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>

#include "engine/checkpoint/checkpoint.hpp"
#include "engine/config/config.hpp"
#include "engine/data/synthetic.hpp"
#include "engine/run/trainer.hpp"
#include "engine/training/callbacks.hpp"
#include "tests/classifier.hpp"
#include "tests/temp_dir.hpp"
#include "tests/test_util.hpp"

using namespace tessera;
using namespace tessera::test;

namespace {

TrainingSpec spec_with(const std::string& callbacks, const std::string& optimizer = "{type: sgd, learning_rate: 0.1}") {
  return parse_training(ConfigNode::parse(
      "training: {loss: {type: sparse_categorical_crossentropy, from_logits: true}, optimizer: " + optimizer +
      ", metrics: [accuracy], epochs: 8, batch_size: 16, seed: 3, callbacks: " + callbacks + "}")["training"]);
}

// A C++ callback: the weights at the end of each epoch, by the FitControl API.
class RecordWeights final : public Callback {
 public:
  void on_epoch_end(const EpochLog&, FitControl& fit) override { epochs.push_back(fit.weights()); }
  std::vector<WeightSnapshot> epochs;
};

std::vector<std::byte> bytes_of(const VariableStore& store, const std::string& path) {
  for (const auto& v : store.variables())
    if (v.path == path) {
      const auto* p = static_cast<const std::byte*>(v.value.raw_data());
      return {p, p + v.value.nbytes()};
    }
  return {};
}

// A new trainer of `spec` resumed from the checkpoint in `dir`, then its fit.
std::vector<EpochLog> resume_and_fit(const TrainingSpec& spec, const std::filesystem::path& dir, const Dataset& data) {
  Model model = classifier();
  VariableStore store;
  model.build(store, 3);
  Trainer trainer(model, spec, store);
  trainer.resume(load_checkpoint(dir, store));
  return trainer.fit(data, nullptr);
}

}  // namespace

TEST_CASE("early_stopping ends fit after patience epochs without improvement, with the best weights if asked") {
  Model model = classifier();
  Dataset data = synthetic_classification(64, {8}, 3, 1);
  VariableStore store;
  // min_delta so large that only the first epoch counts as an improvement.
  Trainer trainer(model,
                  spec_with("[{type: early_stopping, monitor: loss, min_delta: 1.0e9, patience: 2, restore_best_weights: true}]"),
                  store);
  auto record = std::make_shared<RecordWeights>();
  FitCallbacks callbacks;
  callbacks.callbacks.push_back(record);
  const auto logs = trainer.fit(data, nullptr, callbacks);
  REQUIRE(logs.size() == 3);  // epoch 1 is the best; epochs 2 and 3 do not improve: patience 2 is used up at 3
  CHECK(trainer.state().epoch == 3);
  REQUIRE(record->epochs.size() == 3);
  // The recorder ran after early_stopping: at epoch 3 it saw the restored weights of epoch 1.
  for (const auto& variable : record->epochs[0].variables) CHECK_MESSAGE(bytes_of(store, variable.first) == variable.second, variable.first);
  CHECK(record->epochs[2].variables == record->epochs[0].variables);
  CHECK(record->epochs[1].variables != record->epochs[0].variables);  // training did move them
}

TEST_CASE("reduce_lr_on_plateau scales the learning rate after patience epochs without improvement") {
  Model model = classifier();
  Dataset data = synthetic_classification(64, {8}, 3, 1);
  VariableStore store;
  Trainer trainer(model,
                  spec_with("[{type: reduce_lr_on_plateau, monitor: loss, min_delta: 1.0e9, patience: 1, factor: 0.5, "
                            "min_lr: 0.02}]"),
                  store);
  const auto logs = trainer.fit(data, nullptr);
  REQUIRE(logs.size() == 8);
  CHECK(logs[0].learning_rate == doctest::Approx(0.1));
  CHECK(logs[1].learning_rate == doctest::Approx(0.1));   // reduced at its end
  CHECK(logs[2].learning_rate == doctest::Approx(0.05));
  CHECK(logs[3].learning_rate == doctest::Approx(0.025));
  CHECK(logs[4].learning_rate == doctest::Approx(0.02));  // held at min_lr
  CHECK(logs[7].learning_rate == doctest::Approx(0.02));
}

TEST_CASE("reduce_lr_on_plateau: a resumed run keeps the reduced learning rate") {
  TempDir dir;
  Dataset data = synthetic_classification(64, {8}, 3, 1);
  TrainingSpec spec = spec_with("[{type: reduce_lr_on_plateau, monitor: loss, min_delta: 1.0e9, patience: 1, factor: 0.5}]");
  spec.checkpoint.dir = dir / "checkpoint";
  spec.epochs = 3;  // reduced at the ends of epochs 2 and 3
  Model model = classifier();
  VariableStore store;
  Trainer first(model, spec, store);
  CHECK(first.fit(data, nullptr).back().learning_rate == doctest::Approx(0.05));
  const TrainingState saved = read_training_state(dir / "checkpoint");
  CHECK(saved.learning_rate_scale == doctest::Approx(0.25));
  CHECK(saved.figures.size() == 2);  // loss and accuracy
  CHECK(saved.figures.at("loss") > 0);

  spec.epochs = 4;
  const auto logs = resume_and_fit(spec, dir / "checkpoint", data);
  REQUIRE(logs.size() == 1);
  CHECK(logs[0].learning_rate == doctest::Approx(0.025));  // from 1, the schedule's rate, without the factor
}

TEST_CASE("early_stopping and reduce_lr_on_plateau: a resumed run goes on counting where the saved run was") {
  TempDir dir;
  Dataset data = synthetic_classification(64, {8}, 3, 1);
  // Only epoch 1 improves (min_delta): the rate halves after epochs 2 and 4
  // (patience 1, then a cooldown of 2), and training stops after epoch 5.
  // model_checkpoint, listed first, saves every epoch into its own folder.
  TrainingSpec spec = spec_with(
      "[{type: model_checkpoint, dir: " + (dir / "every").string() + ", save_best_only: false}, "
      "{type: reduce_lr_on_plateau, monitor: loss, min_delta: 1.0e9, patience: 1, cooldown: 2, factor: 0.5}, "
      "{type: early_stopping, monitor: loss, min_delta: 1.0e9, patience: 4}]");
  Model model = classifier();
  VariableStore store;
  model.build(store, 3);
  const auto whole = Trainer(model, spec, store).fit(data, nullptr);
  REQUIRE(whole.size() == 5);
  // Resumed with more epochs, the run early stopping ended trains nothing: as it did not.
  std::filesystem::copy(dir / "every", dir / "ended");
  CHECK(resume_and_fit(spec, dir / "ended", data).empty());
  CHECK(read_training_state(dir / "every").epoch == 5);  // model_checkpoint saved no epoch 6

  for (std::int64_t stopped = 1; stopped <= 4; ++stopped) {
    CAPTURE(stopped);
    // Saved by the run's own checkpoint after epoch `stopped`, and by
    // model_checkpoint before the callbacks after it had seen that epoch.
    spec.checkpoint.dir = dir / "stopped";
    spec.epochs = stopped;
    VariableStore first_store;
    model.build(first_store, 3);
    Trainer(model, spec, first_store).fit(data, nullptr);
    const TrainingState saved = read_training_state(dir / "stopped");
    CHECK(saved.callbacks.at("early_stopping loss min").at("wait") == static_cast<double>(stopped - 1));
    CHECK(saved.callbacks.at("early_stopping loss min").at("best") == doctest::Approx(whole[0].train.loss));
    // Reduced after epochs 2 and 4, each time with two epochs of cooldown to come.
    const std::int64_t cooldown[] = {0, 0, 2, 1, 2};
    CHECK(saved.callbacks.at("reduce_lr_on_plateau loss min").at("cooldown") == static_cast<double>(cooldown[stopped]));

    spec.epochs = 8;
    for (const std::string from : {"stopped", "every"}) {  // copies: the resumed runs save into both
      std::filesystem::remove_all(dir / ("from " + from));
      std::filesystem::copy(dir / from, dir / ("from " + from));
    }
    for (const std::string from : {"stopped", "every"}) {
      CAPTURE(from);
      const auto resumed = resume_and_fit(spec, dir / ("from " + from), data);
      REQUIRE(resumed.size() == static_cast<std::size_t>(5 - stopped));  // counting afresh, it would go on to epoch 8
      for (std::size_t i = 0; i < resumed.size(); ++i) {
        const EpochLog& w = whole[static_cast<std::size_t>(stopped) + i];
        CHECK(resumed[i].epoch == w.epoch);
        CHECK(resumed[i].learning_rate == w.learning_rate);
        CHECK(resumed[i].train.loss == w.train.loss);  // resumed to the bit
      }
    }
  }
}

TEST_CASE("model_checkpoint with save_best_only: a resumed run replaces the saved epoch only with a better one") {
  TempDir dir;
  Dataset data = synthetic_classification(64, {8}, 3, 1);
  // The loss falls epoch by epoch, so with mode max epoch 1 is the best of all.
  TrainingSpec spec = spec_with("[{type: model_checkpoint, dir: " + (dir / "best").string() +
                                ", monitor: loss, mode: max, save_best_only: true}]");
  spec.checkpoint.dir = dir / "checkpoint";
  spec.epochs = 2;
  Model model = classifier();
  VariableStore store;
  Trainer first(model, spec, store);
  const auto first_logs = first.fit(data, nullptr);
  REQUIRE(first_logs[1].train.loss < first_logs[0].train.loss);
  CHECK(read_training_state(dir / "best").epoch == 1);

  spec.epochs = 4;
  const auto logs = resume_and_fit(spec, dir / "checkpoint", data);
  REQUIRE(logs.size() == 2);
  REQUIRE(logs[0].train.loss < first_logs[0].train.loss);
  // Forgetting the saved figure, epoch 3 would have been the best so far and replaced epoch 1.
  CHECK(read_training_state(dir / "best").epoch == 1);

  std::ofstream(dir / "best" / "training_state.json") << "{";  // damaged: the run stops before its first step
  spec.epochs = 6;
  const std::string message = error_of<CheckpointError>([&] { resume_and_fit(spec, dir / "checkpoint", data); });
  CHECK(message.find("model_checkpoint): cannot read the best epoch so far") != std::string::npos);
  CHECK(message.find("training_state.json") != std::string::npos);
  CHECK(read_training_state(dir / "checkpoint").epoch == 4);  // nothing trained
}

TEST_CASE("model_checkpoint with save_best_only keeps the epoch of the best monitored figure") {
  TempDir dir;
  Model model = classifier();
  Dataset data = synthetic_classification(96, {8}, 3, 1);
  Dataset validation = synthetic_classification(48, {8}, 3, 1);  // the training blobs: val_loss falls, then wobbles
  VariableStore store;
  Trainer trainer(model,
                  spec_with("[{type: model_checkpoint, dir: " + (dir / "best").string() +
                                ", monitor: val_loss, save_best_only: true}, "
                                "{type: csv_logger, path: " + (dir / "log.csv").string() + "}]",
                            "{type: sgd, learning_rate: 1.0}"),  // the validation loss is lowest at epoch 7 of 8
                  store);
  const auto logs = trainer.fit(data, &validation);
  std::size_t best = 0;
  for (std::size_t i = 1; i < logs.size(); ++i)
    if (logs[i].validation.loss < logs[best].validation.loss) best = i;
  VariableStore saved;
  Model again = classifier();
  again.build(saved, 0);
  // Neither the first epoch nor the last: saving once, or every epoch, would both fail here.
  REQUIRE(best > 0);
  REQUIRE(best + 1 < logs.size());
  CHECK(load_checkpoint(dir / "best", saved).epoch == logs[best].epoch);

  std::ifstream csv(dir / "log.csv");
  std::string header, line;
  std::getline(csv, header);
  CHECK(header == "epoch,loss,accuracy,val_loss,val_accuracy,learning_rate,seconds");
  int rows = 0;
  while (std::getline(csv, line)) {
    ++rows;
    CHECK(line.rfind(std::to_string(rows) + ",", 0) == 0);
  }
  CHECK(rows == 8);
}

TEST_CASE("a callback monitoring a figure the run does not log fails before the first step") {
  Model model = classifier();
  Dataset data = synthetic_classification(64, {8}, 3, 1);
  VariableStore store;
  Trainer trainer(model, spec_with("[{type: early_stopping, patience: 2}]"), store);  // val_loss, and no validation data
  std::string message;
  try {
    trainer.fit(data, nullptr);
  } catch (const ConfigError& e) {
    message = e.what();
  }
  CHECK_MESSAGE(message.find("training.callbacks[0] (early_stopping): monitor 'val_loss' is not a figure this run logs "
                             "(loss, accuracy); val_ figures need validation data") != std::string::npos,
                message);
  CHECK(message.find("<string>:1:") == 0);
  CHECK(trainer.step() == 0);
}

TEST_CASE("training.callbacks: unknown types and bad settings are config errors at the entry") {
  const std::pair<const char*, const char*> cases[] = {
      {"[{type: early_stoping}]", "did you mean 'early_stopping'"},
      {"[{type: reduce_lr_on_plateau, factor: 2}]", "factor must lie in (0, 1)"},
      {"[{type: early_stopping, mode: biggest}]", "mode"},
      {"[{type: csv_logger}]", "path"},
      {"{type: early_stopping}", "callbacks must be a list"},
      {"[{type: early_stopping, patience: 2, patiance: 3}]", "patiance"},
  };
  for (const auto& c : cases) {
    const std::string message = error_of<ConfigError>([&] { spec_with(c.first); });
    CHECK_MESSAGE(message.find(c.second) != std::string::npos, std::string(c.first), " -> ", message);
  }
}

TEST_CASE("csv_logger: a resumed run appends to the log of the run it continues") {
  TempDir dir;
  Model model = classifier();
  Dataset data = synthetic_classification(64, {8}, 3, 1);
  TrainingSpec spec = spec_with("[{type: csv_logger, path: " + (dir / "log.csv").string() + "}]");
  spec.checkpoint.dir = dir / "checkpoint";
  spec.epochs = 2;
  {
    VariableStore store;
    Trainer trainer(model, spec, store);
    trainer.fit(data, nullptr);
  }
  spec.epochs = 4;
  CHECK(resume_and_fit(spec, dir / "checkpoint", data).size() == 2);
  std::ifstream csv(dir / "log.csv");
  std::vector<std::string> lines;
  for (std::string line; std::getline(csv, line);) lines.push_back(line);
  REQUIRE(lines.size() == 5);  // the header once, then epochs 1 to 4
  CHECK(lines[0].rfind("epoch,", 0) == 0);
  for (int epoch = 1; epoch <= 4; ++epoch) CHECK(lines[static_cast<std::size_t>(epoch)].rfind(std::to_string(epoch) + ",", 0) == 0);
}
