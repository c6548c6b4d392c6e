// InferenceModel: a trained model loaded to run, for embedders: predictions,
// and text generation for language models. No Trainer, no optimizer state.
//
//   InferenceModel gpt("configs/kjv_gpt.yaml", "runs/kjv_gpt");   // or a .safetensors file
//   GenerationOptions options;
//   options.max_new_tokens = 100;
//   options.temperature = 0.8;
//   options.top_k = 40;
//   Generation g = gpt.generate({gpt.tokenizer().encode("In the beginning")}, options,
//                               [&](std::size_t, std::int32_t token) { /* stream it */ });
//   std::string text = gpt.tokenizer().decode(g.tokens[0]);
//
// The config gives the model, the device (or the distribution: section's
// mesh) and training.batch_size (the rows predict runs at once); the
// weights are a checkpoint directory written by `tessera train` (either
// form, saved on any mesh; only the model's tensors are read) or one
// safetensors file of the model's variables (`tessera export`).
//
// Generation on one device reads the prompts once (a prefill over each
// one's window of at most context_length() tokens) and then runs one token
// per sequence against a KV cache (engine/run/kv_decoder.hpp). Past the
// context the window slides: each sequence's last context_length() tokens
// are read again for every token (a prefill per step), exactly what a full
// forward pass over that window computes. On a mesh (a distribution:
// section) the same programs run partitioned like any other (heads split
// under tensor parallelism), each cache split as the keys and values written
// into it (with the heads). A batch of prompts the batch axis does not
// divide runs replicated.
// A model with layers that could mix positions otherwise than causally
// (kv_decoder.hpp) runs the whole window for every token. Prompts
// of a batch advance together, one token each per step.
//
// Threads: one object may be used by several threads at once and gives each
// the results it would alone; the calls take turns (a device's backend runs
// one kernel stream at a time).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/checkpoint/non_finite.hpp"
#include "engine/core/tensor.hpp"
#include "engine/run/sampler.hpp"
#include "engine/run/tokenizer.hpp"

namespace tessera {

class KvDecoder;
class Model;
class StepHost;
class Trainer;
class VariableStore;
struct RunConfig;

struct GenerationOptions : SamplingOptions {
  std::int64_t max_new_tokens = 64;
  std::uint64_t seed = 0;  // with the same prompts and options, the same tokens
  // A sequence ends when it draws one of these (not added to its tokens);
  // generation ends when every sequence has (tessera generate passes the
  // tokenizer's end_of_text()). Empty: each runs max_new_tokens.
  std::vector<std::int32_t> stop_tokens;
};

struct Generation {
  std::vector<std::vector<std::int32_t>> tokens;  // the new tokens, per prompt
  std::vector<bool> stopped;                       // per prompt: it drew a stop token
  std::int64_t prompt_tokens = 0;                  // over all prompts
  double first_token_seconds = 0;  // the first step: reading the prompts, and their first token
  double later_tokens_seconds = 0;  // every later step
};

// Called for each new token as soon as it is chosen: the prompt's index, the
// token. It runs inside generate(), so it must not call the same model.
using TokenCallback = std::function<void(std::size_t prompt, std::int32_t token)>;

class InferenceModel {
 public:
  // `overrides` as tessera's --set ("device=cuda:0"). Throws ConfigError for
  // the config, CheckpointError naming the file and tensor when the weights
  // are not this model's or hold NaN or infinities (unless `non_finite`
  // allows them).
  InferenceModel(const std::filesystem::path& config, const std::filesystem::path& weights,
                 const std::vector<std::string>& overrides = {}, NonFinite non_finite = NonFinite::refuse);
  ~InferenceModel();
  InferenceModel(const InferenceModel&) = delete;
  InferenceModel& operator=(const InferenceModel&) = delete;

  const Model& model() const;
  // The bytes of weights kept a second time in the layout this device
  // multiplies fastest (on a CPU whose oneDNN runs its AVX2 sgemm: Dense
  // kernels of 1024k units read by 8 to 511 rows), made on first use.
  std::size_t kept_weight_bytes() const;

  // Outputs for inputs [N, ...] (the model's input shape after N), batch by batch.
  Tensor predict(const Tensor& inputs);

  // Language models: one input of integer tokens [T] (read by an Embedding of
  // V rows, if any reads it directly), output scores [T, V].
  // Throws UnsupportedError for another model, naming what it has; DataError
  // for an empty prompt or a token outside the vocabulary.
  std::int64_t context_length() const;
  const Tokenizer& tokenizer() const;
  // The scores of the token that follows `tokens` (its last context_length()),
  // from a full forward pass over them: the reference of cached decoding.
  std::vector<float> next_token_scores(const std::vector<std::int32_t>& tokens);
  // max_new_tokens tokens after each prompt (a prompt holds at least one token).
  Generation generate(const std::vector<std::vector<std::int32_t>>& prompts, const GenerationOptions& options,
                      const TokenCallback& on_token = {});

 private:
  // [prompts, V]: the scores after each sequence's window.
  std::vector<std::vector<float>> next_scores(const std::vector<std::vector<std::int32_t>>& sequences);
  void check_language_model() const;

  std::unique_ptr<RunConfig> run_;
  std::unique_ptr<VariableStore> store_;
  std::unique_ptr<Trainer> trainer_;
  // The weights' own tensors (shared with store_) and the decoders' KV caches,
  // so that store_ holds only the model's variables.
  std::unique_ptr<VariableStore> decoding_store_;
  std::unique_ptr<StepHost> decoding_host_;  // where the decoders run (the device, or the mesh)
  std::map<std::int64_t, std::unique_ptr<KvDecoder>> decoders_;  // by batch size
  bool incremental_ = false;  // generate decodes against a KV cache
  std::unique_ptr<Tokenizer> tokenizer_;  // null: not a language model
  std::string not_language_model_;       // why, for the error
  std::int64_t context_ = 0, vocabulary_ = 0;
  std::mutex mutex_;
};

// Reads the model's variables of `store` from `weights` (a checkpoint
// directory, either form, or a .safetensors file) into it: every variable
// must be there with its shape and dtype, and nothing else but optimizer
// state, and no NaN or infinity unless `non_finite` allows them. Throws
// CheckpointError naming the file and tensor; on error the store is unchanged.
void load_model_weights(const std::filesystem::path& weights, VariableStore& store,
                        NonFinite non_finite = NonFinite::refuse);

}  // namespace tessera
