#include "engine/run/inference_model.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <set>
#include <tuple>

#include "engine/checkpoint/checkpoint.hpp"
#include "engine/checkpoint/safetensors.hpp"
#include "engine/graph/kept_copies.hpp"
#include "distribution/collectives/process_group.hpp"
#include "engine/run/kv_decoder.hpp"
#include "engine/run/run_config.hpp"
#include "engine/run/step_host.hpp"
#include "engine/run/trainer.hpp"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::string type_of(DType dtype, const std::vector<std::int64_t>& dims) { return std::string(dtype_name(dtype)) + Shape(dims).str(); }

// Each of the store's variables from `tensors` (name -> dtype and shape, and a
// reader of its value), every one checked before any is read.
template <typename Describe, typename Read>
std::map<std::string, Tensor> read_variables(const std::filesystem::path& weights, const VariableStore& store,
                                             const std::vector<std::string>& names, Describe describe, Read read) {
  const std::string where = "'" + weights.string() + "'";
  for (const auto& v : store.variables()) {
    auto [found, dtype, dims] = describe(v.path);
    if (!found) {
      std::vector<std::string> model;
      for (const auto& m : store.variables()) model.push_back(m.path);
      const std::string renamed = renamed_model_hint(model, names);
      throw CheckpointError(where + " has no tensor '" + v.path + "', a variable of the model (" +
                            type_of(v.value.dtype(), v.value.shape().dims()) + "): " +
                            (renamed.empty() ? "weights of another model?" : renamed));
    }
    if (dtype != v.value.dtype() || dims != v.value.shape().dims())
      throw CheckpointError(where + ": tensor '" + v.path + "' is " + type_of(dtype, dims) + ", the model's variable is " +
                            type_of(v.value.dtype(), v.value.shape().dims()));
  }
  std::set<std::string> paths;
  for (const auto& v : store.variables()) paths.insert(v.path);
  for (const auto& name : names)
    if (!is_optimizer_state(name) && !paths.contains(name))
      throw CheckpointError(where + ": tensor '" + name + "' is not a variable of the model: weights of another model?");
  std::map<std::string, Tensor> values;
  for (const auto& v : store.variables()) values[v.path] = read(v.path);
  return values;
}

}  // namespace

namespace {

std::map<std::string, Tensor> read_sharded(const std::filesystem::path& dir, const VariableStore& store) {
  CheckpointReader checkpoint(dir, checkpoint_index(dir));  // each file's header read once for all tensors
  const ShardIndex& index = checkpoint.index();
  std::vector<std::string> names;
  for (const auto& [name, info] : index.tensors) names.push_back(name);
  return read_variables(
      dir, store, names,
      [&](const std::string& path) {
        auto it = index.tensors.find(path);
        return it == index.tensors.end() ? std::tuple{false, DType::f32, std::vector<std::int64_t>{}}
                                         : std::tuple{true, it->second.dtype, it->second.shape};
      },
      [&](const std::string& path) {  // reads only the files holding the model's tensors
        return checkpoint.read(path, ShardSlice::whole(index.tensors.at(path).shape));
      });
}

std::map<std::string, Tensor> read_file(const std::filesystem::path& file, const VariableStore& store) {
  SafetensorsFile read = load_safetensors(file);
  std::map<std::string, Tensor> by_name(read.tensors.begin(), read.tensors.end());
  std::vector<std::string> names;
  for (const auto& [name, t] : by_name) names.push_back(name);
  return read_variables(
      file, store, names,
      [&](const std::string& path) {
        auto it = by_name.find(path);
        return it == by_name.end() ? std::tuple{false, DType::f32, std::vector<std::int64_t>{}}
                                   : std::tuple{true, it->second.dtype(), it->second.shape().dims()};
      },
      [&](const std::string& path) { return by_name.at(path); });
}

}  // namespace

void load_model_weights(const std::filesystem::path& weights, VariableStore& store, NonFinite non_finite) {
  std::map<std::string, Tensor> values;
  if (std::filesystem::is_directory(weights)) {
    // A sharded checkpoint's index names the files of each tensor; a
    // single-file one keeps the model apart from the optimizer's state.
    values = std::filesystem::exists(weights / kShardIndexFile) ? read_sharded(weights, store)
                                                                : read_file(weights / "model.safetensors", store);
  } else if (weights.extension() == ".safetensors") {
    values = read_file(weights, store);
  } else {
    throw CheckpointError("'" + weights.string() + "' is neither a checkpoint directory (written by tessera train) nor "
                          "a .safetensors file (written by tessera export)");
  }
  for (const auto& [path, value] : values) check_finite(value, "'" + weights.string() + "'", "tensor '" + path + "'", non_finite);
  for (auto& v : store.variables()) std::memcpy(v.value.raw_data(), values.at(v.path).raw_data(), v.value.nbytes());
}

InferenceModel::InferenceModel(const std::filesystem::path& config, const std::filesystem::path& weights,
                               const std::vector<std::string>& overrides, NonFinite non_finite)
    : run_(std::make_unique<RunConfig>(load_run_config(config, overrides))), store_(std::make_unique<VariableStore>()) {
  run_->model.build(*store_, run_->training.seed);
  load_model_weights(weights, *store_, non_finite);
  trainer_ = make_trainer(*run_, *store_, job_processes(), TrainerUse::inference);

  // A language model: one input of integer tokens [T], scores [T, V] out.
  const auto& inputs = run_->model.inputs();
  if (inputs.size() != 1 || is_floating(inputs[0].dtype) || inputs[0].shape.rank() != 1) {
    not_language_model_ = "its input is not one sequence of integer tokens [T]";
    return;
  }
  Graph graph;  // every variable exists: tracing creates none
  const Shape out = graph.shape(run_->model.trace(graph, 1, false, *store_, run_->training.seed).output);
  if (out.rank() != 3 || out[1] != inputs[0].shape[0]) {
    not_language_model_ = "its output " + out.str() + " is not one row of scores per token [1, T, V]";
    return;
  }
  context_ = out[1];
  vocabulary_ = out[2];
  // The tokens it reads must be the tokens it scores.
  for (const auto& layer : run_->model.layer_graph())
    if (layer.type == "Embedding" && std::find(layer.sources.begin(), layer.sources.end(), -1) != layer.sources.end())
      if (const Variable* table = store_->find(layer.prefix + "embeddings");
          table && table->value.shape()[0] != vocabulary_) {
        not_language_model_ = "its token embedding '" + layer.name + "' reads " + std::to_string(table->value.shape()[0]) +
                              " tokens but its output scores " + std::to_string(vocabulary_);
        return;
      }
  try {
    tokenizer_ = tokenizer_for(run_->model.declared_tokenizer(), vocabulary_);
  } catch (const Error& e) {
    if (run_->model.declared_tokenizer()) throw;  // a declared tokenizer that cannot serve is the config's error
    not_language_model_ = e.what();
    return;
  }
  if (decodes_incrementally(run_->model)) {
    decoding_store_ = std::make_unique<VariableStore>();
    decoding_store_->variables() = store_->variables();  // the same tensors: nothing copied
    decoding_host_ = run_->distribution
                         ? mesh_host(*decoding_store_, *run_->distribution->distribution, job_processes())
                         : device_host(*decoding_store_, run_->device, Residency::automatic, trainer_->kept_copies());
  }
  incremental_ = decoding_host_ != nullptr;
}

InferenceModel::~InferenceModel() = default;

const Model& InferenceModel::model() const { return run_->model; }

std::size_t InferenceModel::kept_weight_bytes() const {
  const auto kept = trainer_->kept_copies();  // the decoders share them
  return kept ? kept->bytes() : 0;
}

Tensor InferenceModel::predict(const Tensor& inputs) {
  std::lock_guard lock(mutex_);
  return trainer_->predict(inputs);
}

void InferenceModel::check_language_model() const {
  if (!tokenizer_)
    throw UnsupportedError("model '" + run_->model.name() + "' does not generate text: " + not_language_model_);
}

std::int64_t InferenceModel::context_length() const {
  check_language_model();
  return context_;
}

const Tokenizer& InferenceModel::tokenizer() const {
  check_language_model();
  return *tokenizer_;
}

std::vector<std::vector<float>> InferenceModel::next_scores(const std::vector<std::vector<std::int32_t>>& sequences) {
  const auto batch = static_cast<std::int64_t>(sequences.size());
  Tensor tokens = Tensor::empty({batch, context_}, DType::i32);
  std::memset(tokens.raw_data(), 0, tokens.nbytes());  // after a window: causal attention never reads it
  std::vector<std::int64_t> last(sequences.size());
  for (std::size_t b = 0; b < sequences.size(); ++b) {
    const auto& s = sequences[b];
    const auto n = std::min<std::int64_t>(context_, static_cast<std::int64_t>(s.size()));
    std::memcpy(tokens.data<std::int32_t>() + static_cast<std::int64_t>(b) * context_, s.data() + (s.size() - n),
                static_cast<std::size_t>(n) * sizeof(std::int32_t));
    last[b] = n - 1;
  }
  const Tensor scores = trainer_->predict(tokens);  // [batch, T, V]
  const float* p = scores.data<float>();
  std::vector<std::vector<float>> rows;
  for (std::size_t b = 0; b < sequences.size(); ++b) {
    const float* row = p + (static_cast<std::int64_t>(b) * context_ + last[b]) * vocabulary_;
    rows.emplace_back(row, row + vocabulary_);
  }
  return rows;
}

std::vector<float> InferenceModel::next_token_scores(const std::vector<std::int32_t>& tokens) {
  check_language_model();
  if (tokens.empty()) throw Error("next_token_scores: no tokens to continue");
  std::lock_guard lock(mutex_);
  return next_scores({tokens})[0];
}

Generation InferenceModel::generate(const std::vector<std::vector<std::int32_t>>& prompts, const GenerationOptions& options,
                                    const TokenCallback& on_token) {
  check_language_model();
  check_sampling(options);
  if (options.max_new_tokens < 0)
    throw ConfigError("max_new_tokens must be 0 or more, got " + std::to_string(options.max_new_tokens));
  if (prompts.empty()) throw DataError("generate: no prompt");
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) throw DataError("generate: prompt " + std::to_string(i) + " is empty (it needs a token to follow)");
    for (std::int32_t t : prompts[i])
      if (t < 0 || t >= vocabulary_)
        throw DataError("generate: prompt " + std::to_string(i) + " holds token " + std::to_string(t) +
                    ", outside the vocabulary of " + std::to_string(vocabulary_));
  }
  std::lock_guard lock(mutex_);
  Generation g;
  g.tokens.resize(prompts.size());
  for (const auto& p : prompts) g.prompt_tokens += static_cast<std::int64_t>(p.size());
  // One generator per prompt: its tokens do not depend on the other prompts of the batch.
  std::vector<TokenRng> rngs;
  for (std::size_t i = 0; i < prompts.size(); ++i) rngs.emplace_back(options.seed + 0x9E3779B97F4A7C15ull * i);
  std::vector<std::vector<std::int32_t>> sequences = prompts;
  // Each sequence's last context_ tokens.
  auto windows = [&] {
    std::vector<std::vector<std::int32_t>> w;
    for (const auto& s : sequences)
      w.emplace_back(s.end() - std::min<std::ptrdiff_t>(context_, static_cast<std::ptrdiff_t>(s.size())), s.end());
    return w;
  };
  KvDecoder* decoder = nullptr;
  if (incremental_) {
    auto& slot = decoders_[static_cast<std::int64_t>(prompts.size())];
    if (!slot) {
      try {
        slot = std::make_unique<KvDecoder>(run_->model, *decoding_store_, *decoding_host_,
                                           static_cast<std::int64_t>(prompts.size()), run_->training.seed,
                                           run_->training.precision);
      } catch (const UnsupportedError&) {
        incremental_ = false;  // attention that is not causal: every token runs the whole window
      }
    }
    decoder = slot.get();
  }
  std::vector<float> uncached;  // [prompts, V] without a cache
  std::vector<std::int32_t> chosen(prompts.size());
  g.stopped.assign(prompts.size(), false);
  std::size_t running = prompts.size();  // sequences that have drawn no stop token
  for (std::int64_t step = 0; step < options.max_new_tokens && running > 0; ++step) {
    const auto start = Clock::now();
    std::span<const float> scores;
    if (decoder) {
      scores = step > 0 && decoder->has_room() ? decoder->decode(chosen) : decoder->prefill(windows());
    } else {
      uncached.clear();
      for (const auto& row : next_scores(sequences)) uncached.insert(uncached.end(), row.begin(), row.end());
      scores = uncached;
    }
    for (std::size_t i = 0; i < sequences.size(); ++i) {
      if (g.stopped[i]) continue;  // the decoder still takes its stop token each step; its scores go unread
      const auto row = scores.subspan(i * static_cast<std::size_t>(vocabulary_), static_cast<std::size_t>(vocabulary_));
      chosen[i] = sample_token(row, options, rngs[i].next());
      if (std::find(options.stop_tokens.begin(), options.stop_tokens.end(), chosen[i]) != options.stop_tokens.end()) {
        g.stopped[i] = true;
        --running;
        continue;
      }
      sequences[i].push_back(chosen[i]);
      g.tokens[i].push_back(chosen[i]);
      if (on_token) on_token(i, chosen[i]);
    }
    (step == 0 ? g.first_token_seconds : g.later_tokens_seconds) += seconds_since(start);
  }
  return g;
}

}  // namespace tessera
