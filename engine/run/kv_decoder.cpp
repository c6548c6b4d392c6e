#include "engine/run/kv_decoder.hpp"

#include <algorithm>
#include <cstring>
#include <set>
#include <string>

#include "engine/run/step_host.hpp"
#include "layers/model.hpp"

namespace tessera {

struct KvDecoder::Program {
  Graph graph;
  KvTrace kv;
  ValueId tokens = -1, scores = -1;
  Tensor window_tokens;  // a prefill's input [batch, window]
  std::unique_ptr<StepRunner> runner;
};

namespace {

void zero(const Tensor& t) { std::memset(t.raw_data(), 0, t.nbytes()); }

}  // namespace

bool decodes_incrementally(const Model& model) {
  static const std::set<std::string> kByPosition = {"Embedding", "PositionEmbedding", "Add", "Dense", "Activation",
                                                    "LayerNormalization", "BatchNormalization", "Dropout",
                                                    "MultiHeadAttention", "TransformerBlock"};
  const auto layers = model.layer_graph();
  return std::all_of(layers.begin(), layers.end(), [](const Model::LayerNode& l) { return kByPosition.contains(l.type); });
}

std::unique_ptr<KvDecoder::Program> KvDecoder::trace(bool decode, std::int64_t window) {
  auto p = std::make_unique<Program>();
  Graph& g = p->graph;
  p->kv.decode = decode;
  p->kv.context = context_;
  p->kv.window = decode ? 0 : window;
  g.set_matmul_dtype(matmul_dtype_);
  p->kv.positions = g.input("kv/positions", {batch_, 1}, DType::i32);
  if (!decode) p->kv.last_rows = g.input("kv/last_rows", {batch_, 1}, DType::i32);  // only they are read
  Model::Traced traced = model_.trace(g, batch_, /*training=*/false, store_, seed_, &p->kv);
  if (!p->kv.causal)  // before a runner holds (device copies of) anything
    throw UnsupportedError("incremental decoding needs causal attention: a position must not see later ones");
  p->tokens = traced.inputs[0];
  p->scores = traced.output;
  // The model's variables take the distribution's layouts; the caches are state, split as their rows.
  std::vector<std::pair<std::string, ValueId>> model_variables;
  for (const auto& v : traced.variables)
    if (std::find(p->kv.caches.begin(), p->kv.caches.end(), v.first) == p->kv.caches.end()) model_variables.push_back(v);
  // Layer outputs by their paths (a layout map's activation keys), as the Trainer's programs give them.
  p->runner = host_.runner(TracedStep{g, {p->scores}, p->tokens, -1, -1, model_variables, traced.variables,
                                      traced.layer_outputs, /*fixed_variables=*/true});
  if (!decode) p->window_tokens = Tensor::empty({batch_, window}, DType::i32);
  return p;
}

KvDecoder::Program& KvDecoder::prefill_program(std::int64_t window) {
  std::int64_t length = 8;  // a power of two: few programs, at most twice the work
  while (length < window) length *= 2;
  length = std::min(length, context_);
  auto& slot = prefills_[length];
  if (!slot) slot = trace(false, length);
  return *slot;
}

KvDecoder::KvDecoder(const Model& model, VariableStore& store, StepHost& host, std::int64_t batch, std::uint64_t seed,
                     DType matmul_dtype)
    : model_(model), store_(store), host_(host), seed_(seed), matmul_dtype_(matmul_dtype), batch_(batch),
      length_(static_cast<std::size_t>(batch), 0) {
  context_ = model.inputs().at(0).shape[0];
  decode_ = trace(true, 0);
  vocabulary_ = decode_->graph.shape(decode_->scores)[2];
  scores_.resize(static_cast<std::size_t>(batch_ * vocabulary_));

  tokens_ = Tensor::empty({batch_, 1}, DType::i32);
  positions_ = Tensor::empty({batch_, 1}, DType::i32);
  start_ = Tensor::empty({batch_, 1}, DType::i32);
  zero(start_);
  last_rows_ = Tensor::empty({batch_, 1}, DType::i32);
}

// Inputs are bound before every run: a runner that stages them onto a GPU
// copies them when bound (engine/graph/staged_runner.hpp); an executor on the
// CPU only takes their address.
void KvDecoder::bind_decode_inputs() {
  StepRunner& r = *decode_->runner;
  r.bind(decode_->tokens, tokens_);
  r.bind(decode_->kv.positions, positions_);
}

KvDecoder::~KvDecoder() = default;

std::span<const float> KvDecoder::prefill(const std::vector<std::vector<std::int32_t>>& windows) {
  if (static_cast<std::int64_t>(windows.size()) != batch_)
    throw Error("kv decoder: " + std::to_string(windows.size()) + " windows for a batch of " + std::to_string(batch_));
  std::int64_t longest = 0;
  for (const auto& w : windows) {
    const auto n = static_cast<std::int64_t>(w.size());
    if (n < 1 || n > context_)
      throw Error("kv decoder: a window of " + std::to_string(n) + " tokens (1 to " + std::to_string(context_) + ")");
    longest = std::max(longest, n);
  }
  Program& p = prefill_program(longest);
  const std::int64_t window = p.window_tokens.shape()[1];
  zero(p.window_tokens);  // after a window: causal attention never reads it
  for (std::size_t b = 0; b < windows.size(); ++b)
    std::copy(windows[b].begin(), windows[b].end(), p.window_tokens.data<std::int32_t>() + static_cast<std::int64_t>(b) * window);
  p.runner->bind(p.tokens, p.window_tokens);
  for (std::size_t b = 0; b < windows.size(); ++b)
    last_rows_.data<std::int32_t>()[b] = static_cast<std::int32_t>(windows[b].size() - 1);
  p.runner->bind(p.kv.positions, start_);
  p.runner->bind(p.kv.last_rows, last_rows_);
  primed_ = false;  // until the caches hold these windows whole
  p.runner->run();
  primed_ = true;
  for (std::size_t b = 0; b < windows.size(); ++b) length_[b] = static_cast<std::int64_t>(windows[b].size());
  // [batch, 1, vocabulary] at the last rows, or [batch, window, vocabulary] where
  // the scores come from a layer before the last attention (KvTrace::last_rows).
  const Tensor scores = p.runner->output(p.scores);
  const bool whole_window = scores.shape()[1] == window && window > 1;
  for (std::int64_t b = 0; b < batch_; ++b) {
    const std::int64_t row = whole_window ? b * window + length_[static_cast<std::size_t>(b)] - 1 : b;
    std::memcpy(scores_.data() + b * vocabulary_, scores.data<float>() + row * vocabulary_,
                static_cast<std::size_t>(vocabulary_) * sizeof(float));
  }
  return scores_;
}

bool KvDecoder::has_room() const {
  return std::all_of(length_.begin(), length_.end(), [&](std::int64_t n) { return n < context_; });
}

std::span<const float> KvDecoder::decode(const std::vector<std::int32_t>& tokens) {
  if (static_cast<std::int64_t>(tokens.size()) != batch_ || !has_room() || !primed_)
    throw Error("kv decoder: decode needs one token per sequence, a prefill before and room in every cache");
  for (std::int64_t b = 0; b < batch_; ++b) {
    tokens_.data<std::int32_t>()[b] = tokens[static_cast<std::size_t>(b)];
    positions_.data<std::int32_t>()[b] = static_cast<std::int32_t>(length_[static_cast<std::size_t>(b)]);
  }
  bind_decode_inputs();
  primed_ = false;  // a failed step leaves the caches part-written
  decode_->runner->run();
  primed_ = true;
  const Tensor scores = decode_->runner->output(decode_->scores);  // [batch, 1, vocabulary]
  std::memcpy(scores_.data(), scores.raw_data(), scores.nbytes());
  for (auto& n : length_) ++n;
  return scores_;
}

}  // namespace tessera
