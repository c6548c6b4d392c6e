// Inference for embedders (engine/run/inference_model.hpp): the sampler's
// rules, the byte tokenizer, loading a model's weights without a trainer,
// and generation: greedy tokens equal the argmax of a full forward pass at
// every step, sampled ones repeat with their seed, and one model object
// serves several threads at once.
#include <doctest/doctest.h>

#include <barrier>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <span>
#include <thread>

#include "backends/registry.hpp"
#include "engine/core/allocator.hpp"
#include "engine/checkpoint/checkpoint.hpp"
#include "engine/checkpoint/safetensors.hpp"
#include "engine/checkpoint/sharded_checkpoint.hpp"
#include "distribution/spmd_program.hpp"
#include "engine/config/config.hpp"
#include "engine/run/inference_model.hpp"
#include "engine/run/kv_decoder.hpp"
#include "engine/run/step_host.hpp"
#include "engine/run/run_config.hpp"
#include "engine/run/trainer.hpp"
#include "tests/temp_dir.hpp"

using namespace tessera;

namespace {

std::vector<float> log_probabilities(const std::vector<double>& p) {
  std::vector<float> logits;
  for (double x : p) logits.push_back(static_cast<float>(std::log(x)));
  return logits;
}

// A tiny causal language model over bytes, context 16, in a config file.
constexpr const char* kTinyGpt = R"(model:
  name: tiny_gpt
  inputs: [{name: tokens, shape: [16], dtype: i32}]
  layers:
    - {type: Embedding, name: token_embedding, input_dim: 256, output_dim: 32, inputs: [tokens]}
    - {type: PositionEmbedding, name: position_embedding, sequence_length: 16, inputs: [token_embedding]}
    - {type: Add, name: embeddings, inputs: [token_embedding, position_embedding]}
    - {type: TransformerBlock, name: block_0, num_heads: 2, key_dim: 16, ff_dim: 64, causal: true, inputs: [embeddings]}
    - {type: LayerNormalization, name: final_norm, inputs: [block_0]}
    - {type: Dense, name: head, units: 256, use_bias: false, inputs: [final_norm]}
training: {loss: {type: sparse_categorical_crossentropy, from_logits: true}, optimizer: {type: adam}, batch_size: 3, seed: 11}
)";

// A text edit of kTinyGpt: the first `from` becomes `to`.
struct ConfigEdit {
  std::string from, to;
};

// Writes kTinyGpt, edited, to `path` and loads it.
RunConfig write_tiny_gpt(const std::filesystem::path& path, const ConfigEdit& edit) {
  std::string text = kTinyGpt;
  if (!edit.from.empty()) text.replace(text.find(edit.from), edit.from.size(), edit.to);
  std::ofstream(path) << text;
  return load_run_config(path);
}

// The config (kTinyGpt, edited), and its weights (drawn from `seed`) as a
// checkpoint and as one safetensors file.
struct TinyGpt {
  test::TempDir dir;
  std::filesystem::path config = dir / "tiny_gpt.yaml", checkpoint = dir / "checkpoint",
                        file = dir / "tiny_gpt.safetensors";
  RunConfig run;
  VariableStore store;
  explicit TinyGpt(std::uint64_t seed = 5, const ConfigEdit& edit = {}) : run(write_tiny_gpt(config, edit)) {
    run.model.build(store, seed);
    save_checkpoint(checkpoint, store, TrainingState{}, run.root.dump());
    NamedTensors tensors;
    for (const auto& v : store.variables()) tensors.emplace_back(v.path, v.value);
    save_safetensors(file, tensors, {});
  }
};

std::int32_t argmax(const std::vector<float>& scores) {
  return static_cast<std::int32_t>(std::max_element(scores.begin(), scores.end()) - scores.begin());
}

}  // namespace

TEST_CASE("sampling: greedy, top-k and top-p leave only the tokens they allow") {
  const auto logits = log_probabilities({0.05, 0.5, 0.15, 0.3});
  CHECK(allowed_tokens(logits, {.temperature = 0}) == std::vector<std::int32_t>{1});
  CHECK(sample_token(logits, {.temperature = 0}, 0.99) == 1);
  CHECK(sample_token(std::vector<float>{2, 7, 7, 1}, {.temperature = 0}, 0.5) == 1);  // the first of equal scores
  CHECK(allowed_tokens(logits, {}) == std::vector<std::int32_t>{0, 1, 2, 3});
  CHECK(allowed_tokens(logits, {.top_k = 2}) == std::vector<std::int32_t>{1, 3});
  CHECK(allowed_tokens(logits, {.top_p = 0.5}) == std::vector<std::int32_t>{1});
  CHECK(allowed_tokens(logits, {.top_p = 0.8}) == std::vector<std::int32_t>{1, 3});
  CHECK(allowed_tokens(logits, {.top_p = 0.81}) == std::vector<std::int32_t>{1, 2, 3});
  CHECK(allowed_tokens(logits, {.top_k = 3, .top_p = 0.99}) == std::vector<std::int32_t>{1, 2, 3});
  // A NaN score is never chosen over a real one.
  CHECK(sample_token(std::vector<float>{NAN, 1.0f, 0.5f}, {.temperature = 0}, 0.1) == 1);
  CHECK(allowed_tokens(std::vector<float>{NAN, 1.0f, 0.5f}, {.top_p = 0.5}) == std::vector<std::int32_t>{1});
  for (const SamplingOptions& bad : {SamplingOptions{.temperature = -1}, SamplingOptions{.temperature = INFINITY},
                                     SamplingOptions{.top_k = -2}, SamplingOptions{.top_p = 0},
                                     SamplingOptions{.top_p = 1.5}})
    CHECK_THROWS_AS(check_sampling(bad), ConfigError);
}

TEST_CASE("sampling: draws follow the probabilities, renormalised over the allowed tokens") {
  const auto logits = log_probabilities({0.05, 0.5, 0.15, 0.3});
  // temperature 1 over all; top_k 2 renormalises 0.5 and 0.3; temperature 0.5 squares and renormalises.
  const std::vector<std::pair<SamplingOptions, std::vector<double>>> cases = {
      {{}, {0.05, 0.5, 0.15, 0.3}},
      {{.top_k = 2}, {0, 0.5 / 0.8, 0, 0.3 / 0.8}},
      {{.temperature = 0.5}, {0.0025 / 0.3650, 0.25 / 0.3650, 0.0225 / 0.3650, 0.09 / 0.3650}}};
  for (const auto& c : cases) {
    const SamplingOptions& options = c.first;
    const std::vector<double>& expected = c.second;
    TokenRng rng(42);
    std::vector<double> counts(4, 0);
    const int draws = 40000;
    for (int i = 0; i < draws; ++i) counts[static_cast<std::size_t>(sample_token(logits, options, rng.next()))] += 1;
    for (std::size_t t = 0; t < 4; ++t) {
      INFO("token " << t << " temperature " << options.temperature << " top_k " << options.top_k);
      CHECK(std::abs(counts[t] / draws - expected[t]) < 0.01);  // 4 standard deviations at p = 0.5
      if (expected[t] == 0) CHECK(counts[t] == 0);
    }
  }
}

TEST_CASE("sampling: the token generator is the standard's mt19937_64, the same on every machine") {
  TokenRng a(5489), b(5489), c(5490);
  double first = a.next();
  CHECK(first == b.next());
  CHECK(first != c.next());
  CHECK(first >= 0);
  CHECK(first < 1);
  // The standard fixes the 10000th output of mt19937_64 seeded with 5489.
  TokenRng r(5489);
  double x = 0;
  for (int i = 0; i < 10000; ++i) x = r.next();
  CHECK(x == static_cast<double>(9981545732273789042ull >> 11) * 0x1.0p-53);
}

TEST_CASE("the byte tokenizer: text to bytes and back") {
  ByteTokenizer bytes;
  const std::string text = "In the beginning, \xc3\xa9";
  const auto tokens = bytes.encode(text);
  CHECK(tokens.size() == text.size());
  CHECK(tokens.back() == 0xa9);
  CHECK(bytes.decode(tokens) == text);
  const std::vector<std::int32_t> bad{65, 256};
  CHECK_THROWS_WITH_AS(bytes.decode(bad), doctest::Contains("token 256 is not a byte"), Error);
}

TEST_CASE("an inference model loads a checkpoint or a safetensors file, and scores as the trainer's forward pass") {
  TinyGpt gpt;
  InferenceModel from_dir(gpt.config, gpt.checkpoint), from_file(gpt.config, gpt.file);
  CHECK(from_dir.context_length() == 16);
  CHECK(from_dir.tokenizer().name() == "bytes");
  const std::vector<std::int32_t> prompt = from_dir.tokenizer().encode("Tessera");
  const auto scores = from_dir.next_token_scores(prompt);
  CHECK(scores.size() == 256);
  CHECK(scores == from_file.next_token_scores(prompt));
  // The same scores from a Trainer's forward pass over the padded window.
  RunConfig run = load_run_config(gpt.config);
  VariableStore store;
  run.model.build(store, 5);
  Trainer trainer(run.model, run.training, store);
  Tensor tokens = Tensor::empty({1, 16}, DType::i32);
  std::fill_n(tokens.data<std::int32_t>(), 16, 0);
  std::copy(prompt.begin(), prompt.end(), tokens.data<std::int32_t>());
  const Tensor out = trainer.forward(tokens);
  const float* row = out.data<float>() + (static_cast<std::int64_t>(prompt.size()) - 1) * 256;
  CHECK(scores == std::vector<float>(row, row + 256));
  // predict gives the whole output.
  CHECK(from_dir.predict(tokens).shape() == Shape{1, 16, 256});
}

TEST_CASE("an inference model refuses weights of another model, naming the tensor, and changes nothing") {
  TinyGpt gpt;
  test::TempDir other;
  std::ofstream(other / "other.safetensors").close();
  NamedTensors wrong{{"tiny_gpt/head/kernel", Tensor::empty({32, 255}, DType::f32)}};
  save_safetensors(other / "wrong.safetensors", wrong, {});
  CHECK_THROWS_WITH_AS(InferenceModel(gpt.config, other / "wrong.safetensors"),
                       doctest::Contains("has no tensor 'token_embedding/embeddings'"), CheckpointError);
  NamedTensors extra;
  SafetensorsFile whole = load_safetensors(gpt.file);
  extra = whole.tensors;
  extra.emplace_back("dense_9/kernel", Tensor::empty({2, 2}, DType::f32));
  save_safetensors(other / "extra.safetensors", extra, {});
  CHECK_THROWS_WITH_AS(InferenceModel(gpt.config, other / "extra.safetensors"),
                       doctest::Contains("tensor 'dense_9/kernel' is not a variable of the model"), CheckpointError);
  CHECK_THROWS_WITH_AS(InferenceModel(gpt.config, other / "weights.bin"),
                       doctest::Contains("neither a checkpoint directory"), CheckpointError);
}

TEST_CASE("an inference model refuses weights holding NaN unless allowed") {
  TinyGpt gpt;
  test::TempDir other;
  SafetensorsFile whole = load_safetensors(gpt.file);
  const std::string name = whole.tensors.front().first;
  const Tensor& table = whole.tensors.front().second;
  static_cast<float*>(table.raw_data())[2] = std::numeric_limits<float>::quiet_NaN();
  save_safetensors(other / "nan.safetensors", whole.tensors, {});  // its checksums agree: only the values are bad
  const std::string expected = "tensor '" + name + "': 1 of " + std::to_string(table.numel()) +
                               " values are NaN or infinite (the first at element 2); refused";
  CHECK_THROWS_WITH_AS(InferenceModel(gpt.config, other / "nan.safetensors"), doctest::Contains(expected.c_str()),
                       CheckpointError);
  CHECK_NOTHROW(InferenceModel(gpt.config, other / "nan.safetensors", {}, NonFinite::allow));
}

TEST_CASE("an inference model does not read optimizer state: a checkpoint without it loads") {
  TinyGpt gpt;
  // A trained checkpoint holds Adam's state beside the model's; drop it.
  RunConfig run = load_run_config(gpt.config);
  VariableStore store;
  run.model.build(store, 5);
  Trainer trainer(run.model, run.training, store);
  Tensor tokens = Tensor::empty({3, 16}, DType::i32);
  for (std::int64_t i = 0; i < 48; ++i) tokens.data<std::int32_t>()[i] = static_cast<std::int32_t>(i * 7 % 256);
  trainer.train_step(tokens, tokens);
  test::TempDir dir;
  save_checkpoint(dir / "trained", store, trainer.state(), run.root.dump());
  REQUIRE(std::filesystem::exists(dir / "trained" / "optimizer.safetensors"));
  InferenceModel with_state(gpt.config, dir / "trained");
  std::filesystem::remove(dir / "trained" / "optimizer.safetensors");
  const std::vector<std::int32_t> prompt{1, 2, 3};
  const auto scores = with_state.next_token_scores(prompt);
  InferenceModel without(gpt.config, dir / "trained");
  CHECK(without.next_token_scores(prompt) == scores);
}

TEST_CASE("greedy generation is the argmax of a full forward pass at every step, past the context too") {
  TinyGpt gpt;
  InferenceModel model(gpt.config, gpt.checkpoint);
  const std::vector<std::vector<std::int32_t>> prompts = {
      model.tokenizer().encode("In the"), model.tokenizer().encode("A"),
      model.tokenizer().encode("a prompt longer than the sixteen tokens of context")};
  GenerationOptions greedy;
  greedy.temperature = 0;
  greedy.max_new_tokens = 20;  // the first two prompts pass the context length too
  std::vector<std::pair<std::size_t, std::int32_t>> streamed;
  const Generation g = model.generate(prompts, greedy, [&](std::size_t i, std::int32_t t) { streamed.emplace_back(i, t); });
  REQUIRE(g.tokens.size() == 3);
  CHECK(streamed.size() == 60);
  CHECK(g.prompt_tokens == static_cast<std::int64_t>(prompts[0].size() + prompts[1].size() + prompts[2].size()));
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    std::vector<std::int32_t> sequence = prompts[i];
    REQUIRE(g.tokens[i].size() == 20);
    for (std::size_t step = 0; step < 20; ++step) {
      INFO("prompt " << i << " step " << step);
      const std::int32_t expected = argmax(model.next_token_scores(sequence));
      CHECK(g.tokens[i][step] == expected);
      CHECK(streamed[step * 3 + i] == std::pair{i, expected});
      sequence.push_back(expected);
    }
    // A prompt alone generates what it generates in the batch.
    CHECK(model.generate({prompts[i]}, greedy).tokens[0] == g.tokens[i]);
  }
}

namespace {

// 12 tokens drawn at temperature 1.5 among the 5 likeliest, seed 99.
GenerationOptions sampled_twelve() {
  GenerationOptions o;
  o.temperature = 1.5;
  o.top_k = 5;
  o.max_new_tokens = 12;
  o.seed = 99;
  return o;
}

}  // namespace

TEST_CASE("a sequence ends at a stop token, which it does not keep, and the others go on as they would") {
  TinyGpt gpt;
  InferenceModel model(gpt.config, gpt.file);
  const std::vector<std::vector<std::int32_t>> prompts = {{72, 101}, {10}};
  GenerationOptions o = sampled_twelve();
  const Generation free = model.generate(prompts, o);
  CHECK(free.stopped == std::vector<bool>{false, false});
  // A token that prompt 0 first draws as its third or later token and prompt 1 never draws.
  const auto& first = free.tokens[0];
  std::int32_t stop = -1;
  std::size_t at = 0;
  for (std::size_t k = 2; k < first.size() && stop < 0; ++k)
    if (std::find(first.begin(), first.begin() + static_cast<std::ptrdiff_t>(k), first[k]) ==
            first.begin() + static_cast<std::ptrdiff_t>(k) &&
        std::find(free.tokens[1].begin(), free.tokens[1].end(), first[k]) == free.tokens[1].end()) {
      stop = first[k];
      at = k;
    }
  REQUIRE(stop >= 0);
  o.stop_tokens = {stop};
  std::vector<std::size_t> streamed(2, 0);
  const Generation g = model.generate(prompts, o, [&](std::size_t i, std::int32_t t) {
    ++streamed[i];
    CHECK(t != stop);
  });
  CHECK(g.tokens[0] == std::vector<std::int32_t>(first.begin(), first.begin() + static_cast<std::ptrdiff_t>(at)));
  CHECK(g.tokens[1] == free.tokens[1]);
  CHECK(g.stopped == std::vector<bool>{true, false});
  CHECK(streamed == std::vector<std::size_t>{at, 12});
  // Every sequence stops at its first token: generation ends there, with nothing.
  o.stop_tokens = {free.tokens[0][0], free.tokens[1][0]};
  const Generation none = model.generate(prompts, o);
  CHECK(none.tokens == std::vector<std::vector<std::int32_t>>{{}, {}});
  CHECK(none.stopped == std::vector<bool>{true, true});
}

TEST_CASE("sampled generation repeats with its seed, draws only allowed tokens, and a prompt's tokens do not depend on its batch") {
  TinyGpt gpt;
  InferenceModel model(gpt.config, gpt.file);
  const std::vector<std::vector<std::int32_t>> prompts = {{72, 101}, {10}};
  GenerationOptions o = sampled_twelve();
  const Generation a = model.generate(prompts, o), b = model.generate(prompts, o);
  CHECK(a.tokens == b.tokens);
  o.seed = 100;
  CHECK(model.generate(prompts, o).tokens != a.tokens);
  o.seed = 99;
  CHECK(model.generate({prompts[0]}, o).tokens[0] == a.tokens[0]);
  // Every token is among the 5 likeliest after its sequence.
  std::vector<std::int32_t> sequence = prompts[1];
  for (std::int32_t t : a.tokens[1]) {
    const auto allowed = allowed_tokens(model.next_token_scores(sequence), o);
    CHECK(allowed.size() == 5);
    CHECK(std::find(allowed.begin(), allowed.end(), t) != allowed.end());
    sequence.push_back(t);
  }
  CHECK_THROWS_WITH_AS(model.generate({{}}, o), doctest::Contains("prompt 0 is empty"), Error);
  CHECK_THROWS_WITH_AS(model.generate({{300}}, o), doctest::Contains("token 300, outside the vocabulary of 256"), Error);
}

TEST_CASE("one inference model used by several threads at once gives each thread its own results") {
  TinyGpt gpt;
  InferenceModel model(gpt.config, gpt.checkpoint);
  GenerationOptions o;
  o.max_new_tokens = 8;
  std::vector<std::vector<std::int32_t>> prompts;
  std::vector<Generation> alone;
  for (int i = 0; i < 4; ++i) {
    prompts.push_back({i + 40, i + 41, i + 42});
    o.seed = static_cast<std::uint64_t>(i);
    alone.push_back(model.generate({prompts.back()}, o));
  }
  std::vector<Generation> together(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i, o]() mutable {
      o.seed = static_cast<std::uint64_t>(i);
      for (int repeat = 0; repeat < 3; ++repeat) together[static_cast<std::size_t>(i)] = model.generate({prompts[static_cast<std::size_t>(i)]}, o);
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < 4; ++i) CHECK(together[static_cast<std::size_t>(i)].tokens == alone[static_cast<std::size_t>(i)].tokens);
}

TEST_CASE("an inference model of a classifier predicts, and says it does not generate text") {
  test::TempDir dir;
  std::ofstream(dir / "mlp.yaml") << "model:\n  inputs: [{name: x, shape: [4]}]\n  layers:\n    - {type: Dense, units: 3}\n";
  RunConfig run = load_run_config(dir / "mlp.yaml");
  VariableStore store;
  run.model.build(store, 1);
  save_checkpoint(dir / "ckpt", store, TrainingState{}, run.root.dump());
  InferenceModel mlp(dir / "mlp.yaml", dir / "ckpt");
  CHECK(mlp.predict(Tensor::from_vector<float>(std::vector<float>(8, 1.0f), {2, 4})).shape() == Shape{2, 3});
  CHECK_THROWS_WITH_AS(mlp.generate({{1}}, {}), doctest::Contains("does not generate text"), Error);
}

TEST_CASE("generation on a tensor-parallel mesh gives one device's greedy tokens") {
  TinyGpt gpt;
  InferenceModel one(gpt.config, gpt.checkpoint);
  InferenceModel split(gpt.config, gpt.checkpoint,
                       {"distribution={devices: cpu:2, mesh: {shape: [1, 2], axis_names: [batch, model]}, type: auto_tp}"});
  GenerationOptions greedy;
  greedy.temperature = 0;
  greedy.max_new_tokens = 10;
  const std::vector<std::vector<std::int32_t>> prompts = {{84, 104, 101}, {65}};
  CHECK(split.generate(prompts, greedy).tokens == one.generate(prompts, greedy).tokens);
  set_cpu_device_count(1);
}

TEST_CASE("generation on a data-parallel mesh takes any number of prompts, though training's batch would not divide") {
  TinyGpt gpt;  // training.batch_size 3, which 2 devices of the batch axis do not divide: an error for training only
  InferenceModel one(gpt.config, gpt.checkpoint);
  InferenceModel split(gpt.config, gpt.checkpoint, {"distribution={devices: cpu:2}"});
  GenerationOptions greedy;
  greedy.temperature = 0;
  greedy.max_new_tokens = 6;
  for (const std::vector<std::vector<std::int32_t>>& prompts :
       {std::vector<std::vector<std::int32_t>>{{84, 104}, {65}}, std::vector<std::vector<std::int32_t>>{{70}}})
    CHECK(split.generate(prompts, greedy).tokens == one.generate(prompts, greedy).tokens);
  set_cpu_device_count(1);
}

TEST_CASE("cached decoding scores each token as a full forward pass over its window does, and allocates nothing per token") {
  TinyGpt gpt;
  InferenceModel model(gpt.config, gpt.checkpoint);
  RunConfig run = load_run_config(gpt.config);
  VariableStore store;
  run.model.build(store, 0);
  load_model_weights(gpt.checkpoint, store);
  auto host = device_host(store, Device::cpu());
  KvDecoder decoder(run.model, store, *host, 2, 0);
  CHECK_THROWS_WITH_AS(decoder.decode({1, 2}), doctest::Contains("a prefill before"), Error);
  std::vector<std::vector<std::int32_t>> sequences = {{5, 6, 7}, {9}};
  auto check_rows = [&](std::span<const float> scores, const std::string& when) {
    for (std::size_t b = 0; b < 2; ++b) {
      const auto full = model.next_token_scores(sequences[b]);
      float worst = 0;
      for (std::size_t v = 0; v < 256; ++v) worst = std::max(worst, std::abs(scores[b * 256 + v] - full[v]));
      INFO(when << ", sequence " << b << " of " << sequences[b].size() << " tokens: largest difference " << worst);
      CHECK(worst <= 1e-4f);
    }
  };
  check_rows(decoder.prefill(sequences), "prefill");
  Allocator& allocator = allocator_for(Device::cpu());
  for (int step = 0; step < 13; ++step) {  // the first sequence fills its 16 tokens of context
    const std::vector<std::int32_t> next = {static_cast<std::int32_t>(30 + step), static_cast<std::int32_t>(200 - step)};
    sequences[0].push_back(next[0]);
    sequences[1].push_back(next[1]);
    REQUIRE(decoder.has_room());
    const std::int64_t before = allocator.stats().allocations;
    const auto scores = decoder.decode(next);
    if (step > 0) CHECK(allocator.stats().allocations == before);  // the first step planned its memory
    check_rows(scores, "decode step " + std::to_string(step));
  }
  CHECK_FALSE(decoder.has_room());  // 3 + 13 tokens: the context is full
  CHECK_THROWS_WITH_AS(decoder.decode({1, 2}), doctest::Contains("room in every cache"), Error);
}

namespace {

// prefill()'s scores against a full forward pass over each window, for
// windows of 5, 1 and 10 tokens in one batch.
void check_prefill_against_full_pass(TinyGpt& gpt) {
  InferenceModel model(gpt.config, gpt.checkpoint);
  VariableStore store;
  gpt.run.model.build(store, 0);
  load_model_weights(gpt.checkpoint, store);
  auto host = device_host(store, Device::cpu());
  KvDecoder decoder(gpt.run.model, store, *host, 3, 0);
  const std::vector<std::vector<std::int32_t>> windows = {{5, 6, 7, 8, 9}, {9}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}};
  const auto scores = decoder.prefill(windows);
  for (std::size_t b = 0; b < windows.size(); ++b) {
    const auto full = model.next_token_scores(windows[b]);
    float worst = 0;
    for (std::size_t v = 0; v < 256; ++v) worst = std::max(worst, std::abs(scores[b * 256 + v] - full[v]));
    INFO("window " << b << " of " << windows[b].size() << " tokens: largest difference " << worst);
    CHECK(worst <= 1e-5f);
  }
}

}  // namespace

TEST_CASE("a prefill computes the layers after the last attention at each window's last row, or all rows where it must") {
  const std::string final_norm = "    - {type: LayerNormalization, name: final_norm, inputs: [block_0]}";
  SUBCASE("a standalone attention layer and a residual from before it") {
    TinyGpt gpt(5, {"    - {type: TransformerBlock, name: block_0, num_heads: 2, key_dim: 16, ff_dim: 64, causal: true, "
                    "inputs: [embeddings]}",
                    "    - {type: MultiHeadAttention, name: attention, num_heads: 2, key_dim: 16, causal: true, "
                    "inputs: [embeddings]}\n"
                    "    - {type: Add, name: block_0, inputs: [embeddings, attention]}"});
    check_prefill_against_full_pass(gpt);
  }
  SUBCASE("a position embedding after the attention: each row needs its own position") {
    TinyGpt gpt(5, {final_norm,
                    "    - {type: PositionEmbedding, name: late_positions, sequence_length: 16, inputs: [block_0]}\n"
                    "    - {type: Add, name: mixed, inputs: [block_0, late_positions]}\n"
                    "    - {type: LayerNormalization, name: final_norm, inputs: [mixed]}"});
    check_prefill_against_full_pass(gpt);
  }
  SUBCASE("the tokens embedded again after the attention") {
    TinyGpt gpt(5, {final_norm,
                    "    - {type: Embedding, name: late_tokens, input_dim: 256, output_dim: 32, inputs: [tokens]}\n"
                    "    - {type: Add, name: mixed, inputs: [block_0, late_tokens]}\n"
                    "    - {type: LayerNormalization, name: final_norm, inputs: [mixed]}"});
    check_prefill_against_full_pass(gpt);
  }
}

TEST_CASE("a language model whose attention sees later positions generates without a cache, as a full forward pass does") {
  TinyGpt bidirectional(2, {"causal: true", "causal: false"});
  auto host = device_host(bidirectional.store, Device::cpu());
  CHECK(decodes_incrementally(bidirectional.run.model));  // by its layers' types; the trace finds the attention's
  CHECK_THROWS_WITH_AS(KvDecoder(bidirectional.run.model, bidirectional.store, *host, 1, 0),
                       doctest::Contains("needs causal attention"), UnsupportedError);
  // A layer that could mix positions rules the cache out by its type.
  const Model mixing = Model::from_config(ConfigNode::parse(R"(model:
  inputs: [{name: tokens, shape: [4], dtype: i32}]
  layers:
    - {type: Embedding, input_dim: 256, output_dim: 8}
    - {type: Flatten}
    - {type: Dense, units: 1024}
    - {type: Reshape, target_shape: [4, 256]}
)")["model"]);
  CHECK_FALSE(decodes_incrementally(mixing));
  InferenceModel model(bidirectional.config, bidirectional.checkpoint);
  GenerationOptions greedy;
  greedy.temperature = 0;
  greedy.max_new_tokens = 5;
  std::vector<std::int32_t> sequence{70, 71};
  const Generation g = model.generate({sequence}, greedy);
  for (std::int32_t t : g.tokens[0]) {
    CHECK(t == argmax(model.next_token_scores(sequence)));
    sequence.push_back(t);
  }
}

TEST_CASE("a checkpoint saved sharded by two processes loads on one device and generates what its export does") {
  TinyGpt gpt;
  RunConfig run = load_run_config(gpt.config);
  VariableStore store;
  run.model.build(store, 5);
  test::TempDir dir;
  // Two threads stand for the two processes of a 1x2 mesh (as resharding_test
  // does), each writing its blocks of the feed-forward and head kernels.
  set_cpu_device_count(2, 1);
  const DeviceMesh mesh({1, 2}, {"batch", "model"}, cpu_devices(2));
  Sharding columns = Sharding::replicated(2);
  columns.dims.back() = 1;  // the last dimension split over mesh axis 1
  std::barrier meet(2);
  auto save = [&](int process) {
    ShardedVariables mine(mesh, {process}, store);
    mine.blocks("block_0/ffn_in/kernel", columns);
    mine.blocks("head/kernel", columns);
    ShardedSave part = mine.sharded_save(ProcessPlacement{process, 2});
    part.meet = part.barrier = [&] { meet.arrive_and_wait(); };
    save_checkpoint(dir / "sharded", store, TrainingState{}, run.root.dump(), part);
  };
  std::thread other(save, 1);
  save(0);
  other.join();
  set_cpu_device_count(1);
  REQUIRE(std::filesystem::exists(dir / "sharded" / kShardIndexFile));
  export_consolidated(dir / "sharded", dir / "model.safetensors");
  InferenceModel from_shards(gpt.config, dir / "sharded"), from_export(gpt.config, dir / "model.safetensors"),
      original(gpt.config, gpt.checkpoint);
  GenerationOptions greedy;
  greedy.temperature = 0;
  greedy.max_new_tokens = 12;
  const std::vector<std::vector<std::int32_t>> prompts = {{1, 2, 3, 4}, {200}};
  const auto tokens = original.generate(prompts, greedy).tokens;
  CHECK(from_shards.generate(prompts, greedy).tokens == tokens);
  CHECK(from_export.generate(prompts, greedy).tokens == tokens);
  CHECK(from_shards.next_token_scores(prompts[0]) == original.next_token_scores(prompts[0]));
}

TEST_CASE("cached decoding multiplies in the run's precision, as the full forward pass does") {
  TinyGpt gpt;
  InferenceModel bf16(gpt.config, gpt.checkpoint, {"training.precision=bf16"}), f32(gpt.config, gpt.checkpoint);
  RunConfig run = load_run_config(gpt.config, {"training.precision=bf16"});
  VariableStore store;
  run.model.build(store, 0);
  load_model_weights(gpt.checkpoint, store);
  auto host = device_host(store, Device::cpu());
  const std::vector<std::int32_t> prompt{3, 1, 4, 1, 5};
  const auto full = bf16.next_token_scores(prompt), exact = f32.next_token_scores(prompt);
  auto largest_difference = [](std::span<const float> a, const std::vector<float>& b) {
    float d = 0;
    for (std::size_t v = 0; v < 256; ++v) d = std::max(d, std::abs(a[v] - b[v]));
    return d;
  };
  SUBCASE("f32: the full pass's scores, the last row computed alone") {
    KvDecoder decoder(run.model, store, *host, 1, 0, DType::f32);
    CHECK(largest_difference(decoder.prefill({prompt}), exact) <= 1e-5f);
  }
  SUBCASE("bf16: bf16's products, attention over the cache in f32") {
    // The prefill's last attention layer attends over the cache in f32, as a
    // decode step does, where the full pass rounds its softmax weights to
    // bf16: the scores differ from it by that rounding, and from f32's by all
    // the products' casts. The prompt less its last token, then that token
    // decoded, computes the same products the same way.
    KvDecoder decoder(run.model, store, *host, 1, 0, run.training.precision);
    const auto prefilled = decoder.prefill({prompt});
    const std::vector<float> cached(prefilled.begin(), prefilled.end());
    decoder.prefill({std::vector<std::int32_t>(prompt.begin(), prompt.end() - 1)});
    const auto stepped = decoder.decode({prompt.back()});
    const float to_step = largest_difference(stepped, cached), to_full = largest_difference(cached, full),
                to_f32 = largest_difference(cached, exact);
    INFO("largest difference to the prompt's last token decoded " << to_step << ", to the bf16 full pass " << to_full
                                                                  << ", to f32 " << to_f32);
    CHECK(to_step <= 1e-4f);
    CHECK(to_full <= 1e-2f);
    CHECK(to_f32 > 1e-4f);
  }
}

TEST_CASE("a model whose token embedding reads other tokens than it scores does not generate text") {
  TinyGpt mismatch(2, {"input_dim: 256", "input_dim: 100"});
  InferenceModel model(mismatch.config, mismatch.checkpoint);
  CHECK_THROWS_WITH_AS(model.generate({{1}}, {}),
                       doctest::Contains("its token embedding 'token_embedding' reads 100 tokens but its output scores 256"),
                       UnsupportedError);
}

TEST_CASE("an inference model keeps weights in the layout its CPU multiplies fastest, and computes what a trainer does") {
  // ff_dim 1024 and batches of 4 x 16 tokens: the blocks' first matmul is
  // 64 x 32 x 1024, which an AVX2 CPU's backend multiplies against a kept
  // transposed copy of the kernel (Backend::constant_b_form).
  test::TempDir dir;
  std::string text = kTinyGpt;
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"ff_dim: 64", "ff_dim: 1024"}, {"batch_size: 3", "batch_size: 4"}})
    text.replace(text.find(from), from.size(), to);
  const std::filesystem::path config = dir / "wide_ff.yaml", checkpoint = dir / "checkpoint";
  std::ofstream(config) << text;
  RunConfig run = load_run_config(config);
  VariableStore store;
  run.model.build(store, 3);
  save_checkpoint(checkpoint, store, TrainingState{}, run.root.dump());
  Trainer trainer(run.model, run.training, store);  // its weights may change: it keeps no copies
  InferenceModel model(config, checkpoint);

  Tensor tokens = Tensor::empty({4, 16}, DType::i32);
  for (std::int64_t i = 0; i < tokens.numel(); ++i) tokens.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 37) % 256);
  const std::vector<float> expected = trainer.forward(tokens).to_vector<float>(), got = model.predict(tokens).to_vector<float>();
  REQUIRE(got.size() == expected.size());
  float worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - expected[i]));
  INFO("largest difference " << worst);
  CHECK(worst <= 1e-4f);
  // One copy of each kept kernel, shared by predict's program and the
  // decoders' below: transposed (oneDNN's AVX2 sgemm), the block's first
  // feed-forward kernel [32, 1024]; packed (its AVX-512 brgemm), every
  // kernel as its matmul reads it: query, key, value and output [32, 32],
  // the feed-forward's [32, 1024] and [1024, 32], the head's [32, 256].
  Backend& backend = backend_for(Device::cpu());
  std::size_t kept_bytes = 0;
  switch (backend.constant_b_form({64, 32}, {32, 1024}, DType::f32, {})) {
    case ConstantB::transposed: kept_bytes = 32 * 1024 * 4; break;
    case ConstantB::packed:
      kept_bytes = 4 * (4 * backend.packed_b_floats(32, 32) + backend.packed_b_floats(32, 1024) +
                      backend.packed_b_floats(1024, 32) + backend.packed_b_floats(32, 256));
      break;
    case ConstantB::as_is: break;
  }
  CHECK(model.kept_weight_bytes() == kept_bytes);
  if (kept_bytes == 0) MESSAGE("this CPU's backend keeps no transposed or packed weights: the model ran its weights as they are");

  // Greedy generation of 4 prompts (a prefill of 4 x 8 or 4 x 16 rows) is the
  // argmax of the trainer's full forward pass at every step.
  const std::vector<std::vector<std::int32_t>> prompts = {{1, 2, 3}, {40}, {7, 7, 7, 7, 7, 7, 7, 7, 7}, {200, 100}};
  GenerationOptions greedy;
  greedy.temperature = 0;
  greedy.max_new_tokens = 6;
  const Generation g = model.generate(prompts, greedy);
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    std::vector<std::int32_t> sequence = prompts[p];
    for (std::size_t step = 0; step < 6; ++step) {
      Tensor window = Tensor::empty({1, 16}, DType::i32);
      std::fill_n(window.data<std::int32_t>(), 16, 0);
      std::copy(sequence.begin(), sequence.end(), window.data<std::int32_t>());
      const Tensor out = trainer.forward(window);
      const float* row = out.data<float>() + (static_cast<std::int64_t>(sequence.size()) - 1) * 256;
      INFO("prompt " << p << " step " << step);
      CHECK(g.tokens[p][step] == argmax(std::vector<float>(row, row + 256)));
      sequence.push_back(g.tokens[p][step]);
    }
  }
  CHECK(model.kept_weight_bytes() == kept_bytes);
  CHECK_THROWS_WITH_AS(make_trainer(run, store, job_processes(), TrainerUse::inference)->train_step(tokens, tokens),
                       doctest::Contains("runs inference only"), Error);
}
