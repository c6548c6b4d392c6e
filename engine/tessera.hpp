// Tessera: an engine that trains and runs neural networks declared in YAML,
// sharded across devices. This header is the public interface for embedding
// the engine (installed as <tessera/engine/tessera.hpp>; link Tessera::tessera
// from find_package(Tessera), as examples/predict/ does).
//
// It offers run configs (a YAML model, its training and its data), the Model
// built from one, a Trainer with Keras' fit / evaluate / predict, the datasets
// and variable store they work on and checkpoints of that store; underneath
// them, tensors on logical CPU devices (and GPUs when built with CUDA), the
// backend kernels, and a static graph IR with reverse-mode autodiff and a
// planned executor.
//
//   #include <tessera/engine/tessera.hpp>
//   using namespace tessera;
//
//   RunConfig run = load_run_config("configs/tiny_synthetic.yaml", {"training.epochs=2"});
//   VariableStore store;                          // the weights, by Keras-style path
//   run.model.build(store, run.training.seed);
//   Trainer trainer(run.model, run.training, store);
//
//   Dataset train = load_dataset(*run.train_data);                   // or any Dataset
//   std::vector<EpochLog> history = trainer.fit(train, /*validation=*/nullptr);
//   std::cout << "loss " << history.back().train.loss << "\n";
//
//   save_checkpoint("runs/tiny", store, trainer.state(), run.root.dump());
//
//   Tensor logits = trainer.predict(train.inputs.rows(0, 4));        // [4, classes]
//   std::vector<float> scores = logits.to_vector<float>();
//
// Ctrl-C, SIGTERM and SIGUSR1 can stop a fit between two steps, saving that
// position to resume from (run.training.checkpoint.dir; engine/run/interrupt.hpp):
//
//   InterruptCatcher signals;
//   FitCallbacks callbacks;
//   callbacks.interrupted = [&] { return signals.caught() != 0; };
//   trainer.fit(train, nullptr, callbacks);
//
// To run a trained model without a trainer (engine/run/inference_model.hpp):
//
//   InferenceModel gpt("configs/kjv_gpt.yaml", "runs/kjv_gpt/1");    // or a .safetensors file
//   GenerationOptions options;                                       // temperature, top_k, top_p, seed
//   Generation g = gpt.generate({gpt.tokenizer().encode("In the beginning")}, options,
//                               [](std::size_t prompt, std::int32_t token) { /* streamed */ });
//   std::string text = gpt.tokenizer().decode(g.tokens[0]);
//
// Every failure is thrown as a tessera::Error (ConfigError, DataError, ... in
// engine/core/error.hpp), with the file:line:column of a config mistake.
#pragma once

#include "backends/backend.hpp"
#include "backends/registry.hpp"
#include "distribution/distribution.hpp"
#include "distribution/shard_copy.hpp"
#include "engine/checkpoint/checkpoint.hpp"
#include "engine/core/error.hpp"
#include "engine/core/tensor.hpp"
#include "engine/data/dataset.hpp"
#include "engine/data/synthetic.hpp"
#include "engine/graph/autodiff.hpp"
#include "engine/graph/executor.hpp"
#include "engine/graph/graph.hpp"
#include "engine/run/inference_model.hpp"
#include "engine/run/interrupt.hpp"
#include "engine/run/run_config.hpp"
#include "engine/run/trainer.hpp"
#include "engine/variable_store.hpp"
#include "layers/model.hpp"
