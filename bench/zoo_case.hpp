// A zoo model ready for a benchmark's steps: its store, a trainer on `device`
// and one fixed random batch. Inputs are N(0, 1) floats, or tokens uniform in
// [0, classes); targets one label per sample, or per position for a token
// model (the batch bench_models and bench_gpu both time, and the PyTorch
// peers draw alike). Not movable: the trainer refers to the model and store.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/tessera.hpp"

namespace tessera::bench {

struct ZooCase {
  // `optimizer`: a training.optimizer in YAML flow style; the loss is
  // sparse categorical cross-entropy from logits.
  ZooCase(const std::filesystem::path& model_file, std::int64_t batch, std::int64_t classes,
          const std::string& optimizer, Device device = Device::cpu(), DType precision = DType::f32)
      : model(Model::from_config(ConfigNode::load_file(model_file)["model"])), device(device) {
    TrainingSpec training = parse_training(ConfigNode::parse(
        "training:\n"
        "  loss: {type: sparse_categorical_crossentropy, from_logits: true}\n"
        "  optimizer: " + optimizer + "\n"
        "  batch_size: " + std::to_string(batch) + "\n"
        "  seed: 0\n",
        model_file.string())["training"]);
    training.precision = precision;
    model.build(store, training.seed);
    params = store.parameter_count();  // before the optimizer adds its slots
    trainer = std::make_unique<Trainer>(model, training, store, device);

    const ModelInput& in = model.inputs().at(0);
    auto dims = in.shape.dims();
    dims.insert(dims.begin(), batch);
    inputs = Tensor::empty(Shape(dims), in.dtype);
    std::mt19937_64 rng(0);
    std::uniform_int_distribution<std::int32_t> label(0, static_cast<std::int32_t>(classes) - 1);
    if (in.dtype == DType::f32) {
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (std::int64_t i = 0; i < inputs.numel(); ++i) inputs.data<float>()[i] = normal(rng);
      targets = Tensor::empty(Shape({batch}), DType::i32);
    } else {
      for (std::int64_t i = 0; i < inputs.numel(); ++i) inputs.data<std::int32_t>()[i] = label(rng);
      targets = Tensor::empty(inputs.shape(), DType::i32);
    }
    for (std::int64_t i = 0; i < targets.numel(); ++i) targets.data<std::int32_t>()[i] = label(rng);
  }
  ZooCase(const ZooCase&) = delete;
  ZooCase& operator=(const ZooCase&) = delete;

  // One training step (forward, loss, backward, update) or one forward pass,
  // finished on the device.
  void step(bool train) {
    if (train)
      trainer->train_step(inputs, targets);
    else
      trainer->forward(inputs);
    backend_for(device).synchronize();
  }

  // Per op kind over `steps` more steps with the executor's profiling on
  // (each op on its device's clock, Backend::make_op_timer: run after the timed steps),
  // heaviest first.
  struct OpTime {
    std::string op;
    double ms_per_step = 0;
    double calls_per_step = 0;
  };
  std::vector<OpTime> profile(bool train, int steps) {
    std::map<std::string, StepRunner::OpTime> sink;
    trainer->enable_profiling(&sink);
    for (int i = 0; i < steps; ++i) step(train);
    trainer->enable_profiling(nullptr);
    std::vector<OpTime> ops;
    for (const auto& [op, t] : sink)
      ops.push_back({op, t.seconds * 1e3 / steps, static_cast<double>(t.calls) / steps});
    std::sort(ops.begin(), ops.end(), [](const OpTime& a, const OpTime& b) { return a.ms_per_step > b.ms_per_step; });
    return ops;
  }

  Model model;
  Device device;
  VariableStore store;
  std::unique_ptr<Trainer> trainer;
  Tensor inputs, targets;
  std::int64_t params = 0;
};

}  // namespace tessera::bench
