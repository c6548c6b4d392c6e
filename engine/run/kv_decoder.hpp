// KvDecoder: incremental decoding of a causal language model with a KV
// cache, for a fixed batch of sequences, on the device or mesh of a StepHost.
//
// Programs traced and planned once (layers/layer.hpp's KvTrace):
//   prefill  the model over each sequence's window (at most `context` tokens,
//            padded after to a power of two, 8 at least: one program per
//            such length), keeping every attention layer's keys and values;
//   decode   one new token per sequence at its next position, attending over
//            the cache with the new key and value written in.
// Between steps the caches are host-side tensors [B, H, context, K] per
// layer, bound as the decode program's inputs and refreshed from its
// outputs; on the CPU nothing is allocated per token. The cache update is
// exact (the kept entries times 1 plus the new one times 0, and the new
// one's times 1), so a decode step's scores differ from a full forward
// pass's only by the rounding of matmuls of other shapes.
//
// What costs more than it should (a first version): each step reads and
// writes every layer's whole cache to update it, attends over all of
// `context` positions (masked past each sequence's), and copies the
// caches back to the host; a GPU stages them both ways every step. A sequence whose window fills the
// context has no room left: the caller prefills again (see InferenceModel).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "engine/core/tensor.hpp"
#include "engine/graph/graph.hpp"
#include "layers/layer.hpp"

namespace tessera {

class Model;
class StepHost;
class StepRunner;
class VariableStore;

// Whether every layer of `model` computes each position from it and the
// ones before: embeddings, position-wise layers and (causal) attention. A
// layer that could mix positions otherwise (Flatten, Reshape, convolutions,
// pooling, Concatenate) rules incremental decoding out.
bool decodes_incrementally(const Model& model);

class KvDecoder {
 public:
  // `model`: one input of tokens [context], output scores [context, vocabulary],
  // each position computed from those before it (decodes_incrementally()).
  // Throws UnsupportedError for attention that is not causal.
  // `matmul_dtype`: the run's precision (Graph::set_matmul_dtype), as its other programs.
  KvDecoder(const Model& model, VariableStore& store, StepHost& host, std::int64_t batch, std::uint64_t seed,
            DType matmul_dtype = DType::f32);
  ~KvDecoder();

  std::int64_t batch() const { return batch_; }
  // Reads each sequence's window (1 to context tokens) into the cache; the
  // scores after its last token, row b for sequence b: [batch, vocabulary].
  // When it throws, the caches and positions are those before the call.
  std::span<const float> prefill(const std::vector<std::vector<std::int32_t>>& windows);
  // Appends one token per sequence; the scores after it.
  std::span<const float> decode(const std::vector<std::int32_t>& tokens);
  // Whether every sequence can take one more token without passing the context.
  bool has_room() const;

 private:
  struct Program;
  // decode, or a prefill of windows of `window` tokens.
  std::unique_ptr<Program> trace(bool decode, std::int64_t window);
  Program& prefill_program(std::int64_t window);
  // Copies the program's updated caches into the cache tensors.
  void keep_caches(const Program& p);
  void bind_decode_inputs();

  const Model& model_;
  VariableStore& store_;
  StepHost& host_;
  std::uint64_t seed_;
  DType matmul_dtype_;
  std::int64_t batch_, context_ = 0, vocabulary_ = 0;
  std::map<std::int64_t, std::unique_ptr<Program>> prefills_;  // by window length
  std::unique_ptr<Program> decode_;
  std::vector<std::pair<Tensor, Tensor>> caches_;  // per attention layer: keys, values
  Tensor tokens_, positions_, write_, keep_, attend_;  // the decode program's inputs
  std::vector<std::int64_t> length_;  // tokens in each sequence's cache
  std::vector<float> scores_;         // [batch, vocabulary]
};

}  // namespace tessera
