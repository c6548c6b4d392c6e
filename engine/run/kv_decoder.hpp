// KvDecoder: incremental decoding of a causal language model with a KV
// cache, for a fixed batch of sequences, on the device or mesh of a StepHost.
//
// Programs traced and planned once (layers/layer.hpp's KvTrace):
//   prefill  the model over each sequence's window (at most `context` tokens,
//            padded after to a power of two, 8 at least: one program per
//            such length), writing every attention layer's keys and values
//            into its cache from position 0; from the last attention layer
//            on, at each window's last row only (KvTrace::last_rows);
//   decode   one new token per sequence at its next position, its key and
//            value written into the caches, attending over them.
// The caches are variables of the store, [B, H, context, K] per attention
// layer, bound to both programs like the weights and written in place
// (Graph::cache_write): a step moves only the new token's rows, nothing is
// copied between steps, and on a GPU they stay on the device. Nothing is
// allocated per token. A decode step's scores differ from a full forward
// pass's only by the rounding of matmuls of other shapes.
//
// On a mesh the caches are split as the keys and values written into them
// (distribution/partitioner.cpp): with the heads of a tensor-parallel
// attention, with the sequences of a split batch.
//
// A decode step's attention (Graph::cached_attention) reads each sequence's
// filled cache rows only: its cost grows with the sequence, not the context.
// A sequence whose window fills the context has no room left: the caller
// prefills again (see InferenceModel).
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

// The caches belong to the store, named by batch size: decoders of one batch
// size over one store share them, so use one of them at a time (an
// InferenceModel keeps one per batch size). A checkpoint saved from that
// store would hold them too: an InferenceModel gives its decoders a store of
// their own that shares the weights' tensors.
class KvDecoder {
 public:
  // `model`: one input of tokens [context], output scores [context, vocabulary],
  // each position computed from those before it (decodes_incrementally()).
  // Throws UnsupportedError for attention that is not causal.
  // `matmul_dtype`: the run's precision (Graph::set_matmul_dtype), as its other programs.
  // The weights must change only through the host (load, store_changed):
  // its runners may keep copies of them (TracedStep::fixed_variables).
  KvDecoder(const Model& model, VariableStore& store, StepHost& host, std::int64_t batch, std::uint64_t seed,
            DType matmul_dtype = DType::f32);
  ~KvDecoder();

  std::int64_t batch() const { return batch_; }
  // Reads each sequence's window (1 to context tokens) into the cache; the
  // scores after its last token, row b for sequence b: [batch, vocabulary].
  // When it throws, the next decode() throws until a prefill succeeds.
  std::span<const float> prefill(const std::vector<std::vector<std::int32_t>>& windows);
  // Appends one token per sequence; the scores after it. Throws Error
  // without a prefill before, or without room (has_room()).
  std::span<const float> decode(const std::vector<std::int32_t>& tokens);
  // Whether every sequence can take one more token without passing the context.
  bool has_room() const;

 private:
  struct Program;
  // decode, or a prefill of windows of `window` tokens.
  std::unique_ptr<Program> trace(bool decode, std::int64_t window);
  Program& prefill_program(std::int64_t window);
  void bind_decode_inputs();

  const Model& model_;
  VariableStore& store_;
  StepHost& host_;
  std::uint64_t seed_;
  DType matmul_dtype_;
  std::int64_t batch_, context_ = 0, vocabulary_ = 0;
  std::map<std::int64_t, std::unique_ptr<Program>> prefills_;  // by window length
  std::unique_ptr<Program> decode_;
  Tensor tokens_, positions_;  // the decode program's inputs
  Tensor start_;                        // a prefill's positions: zeros
  Tensor last_rows_;                    // a prefill's last row of each window
  std::vector<std::int64_t> length_;    // tokens in each sequence's cache
  bool primed_ = false;                 // the caches hold a prefill's windows
  std::vector<float> scores_;         // [batch, vocabulary]
};

}  // namespace tessera
