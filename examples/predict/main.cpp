// Tessera as a library: load a run config, build its model, train it briefly
// (or load trained weights from a checkpoint), and print the model's
// predictions for a few samples of the config's training data.
//
//   predict CONFIG.yaml                   train briefly, then predict
//   predict CONFIG.yaml CHECKPOINT_DIR    the same, and save a checkpoint there;
//                                         once it exists, load it instead of training
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <tessera/engine/tessera.hpp>

using namespace tessera;

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    std::fprintf(stderr, "usage: %s CONFIG.yaml [CHECKPOINT_DIR]\n", argv[0]);
    return 2;
  }
  const std::filesystem::path checkpoint = argc == 3 ? argv[2] : "";
  try {
    // Overrides ("key=value", as `tessera train --set`) apply on top of the file.
    RunConfig run = load_run_config(argv[1], {"training.epochs=3"});
    VariableStore store;  // the weights, by path ("tiny/dense/kernel")
    run.model.build(store, run.training.seed);
    std::printf("%s\n", run.model.summary(store, run.training.seed).c_str());

    // Any Dataset will do: inputs [N, ...] and, for a classifier, i32 labels [N].
    if (!run.train_data) throw ConfigError(std::string(argv[1]) + ": data.train is required");
    Dataset data = load_dataset(*run.train_data);

    Trainer trainer(run.model, run.training, store);  // on cpu:0
    if (!checkpoint.empty() && std::filesystem::exists(checkpoint)) {
      TrainingState state = load_checkpoint(checkpoint, store);  // into the store's tensors
      std::printf("loaded %s (step %lld)\n", checkpoint.c_str(), static_cast<long long>(state.step));
    } else {
      for (const EpochLog& log : trainer.fit(data, /*validation=*/nullptr))
        std::printf("epoch %lld: loss %.4f\n", static_cast<long long>(log.epoch), log.train.loss);
      if (!checkpoint.empty()) save_checkpoint(checkpoint, store, trainer.state(), run.root.dump());
    }

    // The first samples' logits [n, classes], one row per sample.
    const std::int64_t n = std::min<std::int64_t>(5, data.size());
    Tensor logits = trainer.predict(data.inputs.rows(0, n));
    const std::int64_t classes = logits.shape()[1];
    std::vector<float> scores = logits.to_vector<float>();
    std::vector<std::int32_t> labels = data.targets.rows(0, n).to_vector<std::int32_t>();
    for (std::int64_t i = 0; i < n; ++i) {
      auto row = scores.begin() + i * classes;
      auto best = std::max_element(row, row + classes) - row;
      std::printf("sample %lld: predicted class %lld (logit %.3f), label %d\n", static_cast<long long>(i),
                  static_cast<long long>(best), row[best], labels[static_cast<std::size_t>(i)]);
    }
  } catch (const Error& e) {  // ConfigError, DataError, CheckpointError, ...
    std::fprintf(stderr, "predict: %s\n", e.what());
    return 1;
  }
  return 0;
}
